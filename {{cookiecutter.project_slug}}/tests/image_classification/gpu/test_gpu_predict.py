"""predict.py on a GPU with the GPU defaults (bf16, channels_last, compile) gives the probabilities fp32 on the CPU
gives, within bf16's rounding, and decoding on the GPU (nvJPEG) labels as decoding in the loader workers does."""

from __future__ import annotations

import csv
import re
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.io import decode_image, encode_jpeg, write_png

import predict

from ..trained_model import COLOURS, run_script, trained_checkpoint
from .probes import NEEDS_GPU, NEEDS_TORCHCODEC


def predicted(path: Path) -> dict[str, str]:
    with open(path, newline="") as fh:
        return {row["path"]: row["predicted"] for row in csv.DictReader(fh)}


def probabilities(path: Path) -> dict[str, dict[str, float]]:
    """predict.py's CSV with --top-k covering every class: path -> class -> probability."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    k = sum(name.startswith("class_") for name in rows[0])
    return {r["path"]: {r[f"class_{i}"]: float(r[f"prob_{i}"]) for i in range(1, k + 1)} for r in rows}


def write_ambiguous_images(folder: Path, count: int) -> None:
    """Noisy images whose colour is a random mix of the classes' colours: the classifier is unsure of many, so its
    probabilities, not only its top class, show what bf16 changes."""
    rng = np.random.default_rng(4)
    colours = np.array(list(COLOURS.values()), dtype=float)
    folder.mkdir(parents=True)
    for i in range(count):
        mix = rng.dirichlet([1.0, 1.0, 1.0]) @ colours
        pixels = mix[:, None, None] + rng.normal(0, 40, (3, 32, 32))
        write_png(torch.from_numpy(np.clip(pixels, 0, 255).astype(np.uint8)), str(folder / f"{i:03d}.png"))


@pytest.mark.gpu
@NEEDS_GPU
def test_bf16_gpu_probabilities_agree_with_fp32_cpu_on_images_the_model_is_unsure_of(tmp_path: Path) -> None:
    checkpoint, _ = trained_checkpoint(tmp_path / "tiny-classifier")
    folder = tmp_path / "ambiguous"
    write_ambiguous_images(folder, 48)
    outputs = {}
    for name, flags in {
        "cpu": ["--accelerator=cpu", "--precision=32-true"],
        "gpu": ["--accelerator=cuda", "--precision=bf16-mixed", "--channels-last", "--compile"],
    }.items():
        outputs[name] = tmp_path / f"{name}.csv"
        args = [f"--checkpoint={checkpoint}", str(folder), f"--output={outputs[name]}", "--top-k=3", *flags]
        result = run_script("predict.py", *args)
        assert result.returncode == 0, result.stderr[-3000:]
        assert ("precision=bf16-mixed compile=True" in result.stdout) == (name == "gpu")
    cpu, gpu = probabilities(outputs["cpu"]), probabilities(outputs["gpu"])
    assert list(cpu) == list(gpu) and len(cpu) == 48
    unsure = sum(max(p.values()) < 0.9 for p in cpu.values())
    assert unsure >= 12, f"only {unsure} of 48 images below 0.9: too easy to show a difference"
    worst = max(abs(cpu[path][c] - gpu[path][c]) for path in cpu for c in cpu[path])
    moved = f"bf16 on the GPU moved a probability by {worst:.4f} from fp32 on the CPU"
    print(moved)  # the figure whether or not it passes: scripts/gpu_evidence.sh's summary reads it
    assert worst < 0.05, moved
    agree = sum(max(cpu[p], key=cpu[p].get) == max(gpu[p], key=gpu[p].get) for p in cpu)  # type: ignore[arg-type]
    assert agree >= 0.9 * len(cpu), f"the top class agrees on {agree} of {len(cpu)} images"


@pytest.mark.gpu
@NEEDS_GPU
@NEEDS_TORCHCODEC
def test_gpu_decoding_labels_as_cpu_decoding_does_and_really_runs_nvjpeg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torchcodec.decoders as decoders

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
