"""predict.py and export.py read a sharded checkpoint (--checkpoint-format sharded) as they read the file: the same
rows, the same exported graph. Training, stopping and resuming sharded: tests/image_classification/test_resume.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import run_train
from lightning_gpu_engine import read_checkpoint

from .trained_model import run_script, trained_checkpoint

CPU = ["--accelerator=cpu", "--precision=32-true"]


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[Path, str]]]:
    return trained_checkpoint(tmp_path_factory.getbasetemp() / "tiny-classifier")


def test_predict_and_export_read_a_sharded_folder_as_the_file_it_holds(
    trained: tuple[Path, list[tuple[Path, str]]], tiny_args: list[str], tmp_path: Path
) -> None:
    _, held = trained
    made = run_train(*tiny_args, "--checkpoint-format=sharded")
    assert made.returncode == 0, made.stderr[-3000:]
    sharded = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert sharded.is_symlink() and sharded.resolve().is_dir(), "a link to the folder of its shards"
    checkpoint = tmp_path / "whole.ckpt"
    torch.save(read_checkpoint(sharded), checkpoint)  # the file it holds

    images = [str(path) for path, _ in held[:6]]
    rows = {}
    for name, source in (("file", checkpoint), ("sharded", sharded)):
        output = tmp_path / f"{name}.csv"
        result = run_script("predict.py", "--checkpoint", str(source), *images, f"--output={output}", *CPU)
        assert result.returncode == 0, result.stderr[-3000:]
        rows[name] = output.read_text()
    assert rows["sharded"] == rows["file"] and len(rows["file"].splitlines()) == 7

    exported = tmp_path / "model.onnx"
    result = run_script("export.py", f"--checkpoint={sharded}", "--format=onnx", f"--output={exported}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"exported {exported}" in result.stdout and exported.stat().st_size > 0
