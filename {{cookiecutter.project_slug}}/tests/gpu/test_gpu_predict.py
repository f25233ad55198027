"""predict.py on a GPU with the GPU defaults (bf16, channels_last, compile) labels as fp32 on the CPU does, and
decoding on the GPU (nvJPEG) labels as decoding in the loader workers does."""

from __future__ import annotations

import csv
import re
from contextlib import nullcontext
from pathlib import Path

import pytest
from probes import NEEDS_GPU
from torchvision.io import decode_image, encode_jpeg
from trained_model import run_script, trained_checkpoint

import predict


def predicted(path: Path) -> dict[str, str]:
    with open(path, newline="") as fh:
        return {row["path"]: row["predicted"] for row in csv.DictReader(fh)}


@pytest.mark.gpu
@NEEDS_GPU
def test_bf16_gpu_predictions_agree_with_fp32_cpu_on_the_top_class(tmp_path: Path) -> None:
    checkpoint, held = trained_checkpoint(tmp_path / "tiny-classifier")
    folder = tmp_path / "tiny-classifier" / "held"
    outputs = {}
    for name, flags in {
        "cpu": ["--accelerator=cpu", "--precision=32-true"],
        "gpu": ["--accelerator=cuda", "--precision=bf16-mixed", "--channels-last", "--compile"],
    }.items():
        outputs[name] = tmp_path / f"{name}.csv"
        args = [f"--checkpoint={checkpoint}", str(folder), f"--output={outputs[name]}", *flags]
        result = run_script("predict.py", *args)
        assert result.returncode == 0, result.stderr[-3000:]
        assert ("precision=bf16-mixed compile=True" in result.stdout) == (name == "gpu")
    cpu, gpu = predicted(outputs["cpu"]), predicted(outputs["gpu"])
    assert list(cpu) == list(gpu) and len(cpu) == len(held)
    agree = sum(cpu[path] == gpu[path] for path in cpu)
    assert agree >= 0.95 * len(cpu), f"bf16 on the GPU and fp32 on the CPU agree on {agree} of {len(cpu)} images"


@pytest.mark.gpu
@NEEDS_GPU
def test_gpu_decoding_labels_as_cpu_decoding_does_and_really_runs_nvjpeg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    decoders = pytest.importorskip("torchcodec.decoders", reason="GPU decoding needs TorchCodec, absent here")
    checkpoint, held = trained_checkpoint(tmp_path / "tiny-classifier")
    folder = tmp_path / "jpegs"
    for path, name in held:
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / f"{path.stem}.jpg").write_bytes(bytes(encode_jpeg(decode_image(str(path))).numpy()))
    data = bytes(encode_jpeg(decode_image(str(held[0][0]))).numpy())
    corrupt = folder / "red" / "zz-corrupt.jpg"  # headers of a plain JPEG, no scan: the workers cannot tell
    corrupt.write_bytes(data[: data.index(b"\xff\xda")] + b"\xff\xd9")
    nvjpeg, on_gpu = decoders.decode_jpeg, []

    def spy(sources: object, **options: object) -> object:
        images = nvjpeg(sources, **options)  # type: ignore[arg-type]
        on_gpu.extend(images if isinstance(images, list) else [images])  # counted only when nvJPEG succeeds
        return images

    monkeypatch.setattr(decoders, "decode_jpeg", spy)
    outputs = {}
    for decode in ("cpu", "gpu"):
        outputs[decode] = tmp_path / f"{decode}.csv"
        args = [f"--checkpoint={checkpoint}", str(folder), f"--output={outputs[decode]}", f"--decode={decode}"]
        with pytest.warns(UserWarning, match=re.escape(str(corrupt))) if decode == "gpu" else nullcontext():
            predict.main([*args, "--accelerator=cuda", "--devices=1", "--no-compile", "--num-workers=2"])
        assert f"decode={decode}" in capsys.readouterr().out
        assert len(on_gpu) == (0 if decode == "cpu" else len(held)), "every readable JPEG through nvJPEG, on the GPU"
    assert all(image.device.type == "cuda" for image in on_gpu)
    cpu, gpu = predicted(outputs["cpu"]), predicted(outputs["gpu"])
    assert list(cpu) == list(gpu) == sorted(str(p) for p in folder.rglob("*.jpg") if p != corrupt)
    agree = sum(cpu[path] == gpu[path] for path in cpu)
    assert agree >= 0.95 * len(cpu), f"GPU and CPU decoding agree on {agree} of {len(cpu)} images"
