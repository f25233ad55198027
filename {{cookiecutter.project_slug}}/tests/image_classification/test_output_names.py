"""Outputs are never given a name their format contradicts, nor a folder's: predict.py and export.py refuse such an
--output in one line before any work, and write nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_script


def written(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*"))


def test_predict_refuses_an_output_that_is_a_folder_before_predicting(tmp_path: Path) -> None:
    (tmp_path / "labels.csv").mkdir()
    output = str(tmp_path / "labels.csv")
    done = run_script("predict.py", "--checkpoint", str(tmp_path / "any.ckpt"), "--output", output, "x.png")
    assert done.returncode == 2, done.stderr
    folder = tmp_path / "labels.csv"
    assert done.stderr.strip() == f"error: --output: {folder} is a folder; give a file in it, e.g. {folder}/labels.csv"
    assert written(tmp_path) == ["labels.csv"], "no partial file beside it"


@pytest.mark.parametrize(
    ("fmt", "name", "said"),
    [
        (
            "onnx",
            "model.pt2",
            "model.pt2 is named for torch-export, not onnx: name it model.onnx, or pass --format torch-export",
        ),
        (
            "torch-export",
            "model.ONNX",
            "model.ONNX is named for onnx, not torch-export: name it model.pt2, or pass --format onnx",
        ),
    ],
)
def test_export_refuses_a_suffix_of_the_other_format(tmp_path: Path, fmt: str, name: str, said: str) -> None:
    checkpoint, output = tmp_path / "any.ckpt", str(tmp_path / name)
    checkpoint.write_bytes(b"never read: the output is refused first")  # a missing one is refused before
    done = run_script("export.py", "--checkpoint", str(checkpoint), "--format", fmt, "--output", output)
    assert (done.returncode, done.stderr.strip()) == (2, f"error: --output: {said}")
    assert written(tmp_path) == ["any.ckpt"]


def test_export_refuses_an_output_that_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").mkdir()
    (tmp_path / "any.ckpt").write_bytes(b"never read: the output is refused first")  # a missing one is refused before
    done = run_script("export.py", "--checkpoint", str(tmp_path / "any.ckpt"), "--output", str(tmp_path / "model.onnx"))
    said = f"{tmp_path / 'model.onnx'} is a folder; give a file path ending in .onnx"
    assert (done.returncode, done.stderr.strip()) == (2, f"error: --output: {said}")
