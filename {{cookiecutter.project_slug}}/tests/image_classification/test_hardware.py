"""Where the image task decodes folder images (loader workers are lightning-gpu-engine's tests/test_hardware.py's)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from lightning_gpu_engine import Config, ConfigError, parse_run, resolve_hardware
from PIL import Image

import train
from {{ cookiecutter.package_name }}.tasks.image_classification import TASK
from {{ cookiecutter.package_name }}.tasks.image_classification.config import (
    ImageOptions,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.decoding import (
    decode_choice,
)

CPU = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto"]  # pinned: a bake may default to fsdp or fp16


def parse_args(argv: list[str]) -> tuple[Config, ImageOptions]:
    cfg, opts = parse_run(argv, TASK)
    return cfg, opts


def write_folder(root: Path, suffix: str) -> Path:
    for split in ("train", "val"):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(root / split / name / f"0{suffix}")
    return root


def test_auto_decodes_on_the_gpu_only_with_cuda_torchcodec_and_a_folder_of_jpegs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jpegs, pngs = write_folder(tmp_path / "j", ".jpg"), write_folder(tmp_path / "p", ".png")

    def choice(accelerator: str, *flags: str) -> str:
        _, opts = parse_args([*CPU, *flags])
        return decode_choice(opts.decode, accelerator, opts.data, opts.data_dir)

    assert choice("cuda", "--data=folder", f"--data-dir={jpegs}") == "gpu"
    assert choice("cpu", "--data=folder", f"--data-dir={jpegs}") == "cpu"
    assert choice("cuda", "--data=folder", f"--data-dir={pngs}") == "cpu", "PNGs: nvJPEG cannot take them"
    assert choice("cuda", "--data=synthetic") == "cpu"
    assert choice("cuda", "--data=folder", f"--data-dir={jpegs}", "--decode=cpu") == "cpu"
    monkeypatch.setitem(sys.modules, "torchcodec", None)  # where TorchCodec has no wheel
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)
    assert choice("cuda", "--data=folder", f"--data-dir={jpegs}") == "cpu"
    with pytest.raises(ConfigError, match="--decode: gpu needs TorchCodec"):
        choice("cuda", "--data=folder", f"--data-dir={jpegs}", "--decode=gpu")


def test_the_summary_names_the_decoder(tmp_path: Path) -> None:
    cfg, opts = parse_args([*CPU, "--data=folder", f"--data-dir={tmp_path}"])
    write_folder(tmp_path, ".jpg")
    hw = resolve_hardware(cfg)
    assert TASK.resolve is not None
    hw = dataclasses.replace(hw, choices=TASK.resolve(cfg, opts, hw))
    assert "decode=cpu" in hw.summary()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--decode=gpu"], "error: --decode: gpu needs a CUDA GPU, not cpu; use cpu or auto"),
        (["--decode=gpu", "--data=synthetic"], "error: --decode: gpu decodes image files, which only --data folder"),
        (["--decode=fast"], "error: --decode: 'fast' is not one of: auto, cpu, gpu"),
    ],
)
def test_a_decoder_that_cannot_work_here_is_refused_in_one_line(
    flags: list[str], message: str, tiny_args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_folder(tmp_path / "data", ".jpg")
    with pytest.raises(SystemExit) as exit_info:
        train.main([*tiny_args, "--data=folder", f"--data-dir={data}", *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message)
    assert not (tmp_path / "run").exists()
