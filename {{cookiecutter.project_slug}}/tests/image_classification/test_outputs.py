"""Every entry point of the image classifier that writes a file or a folder (predict.py, export.py, prepare_data.py,
bench.py) opens its output through the engine's one checked path before its work: a folder where a file goes, a file
where a folder goes, a missing or read-only place, or another run writing the same output is one line naming the
flag, exit 2, and nothing written."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from unusable_outputs import assert_each_refused

import bench
import export
import predict
import prepare_data

CPU = ["--accelerator=cpu", "--precision=32-true", "--num-workers=0"]
# script: (its module, its arguments, the output's flag, its name, whether it is a folder)
SCRIPTS: dict[str, tuple[ModuleType, list[str], str, str, bool]] = {
    "predict.py": (predict, ["{tmp}/cat.png", "--checkpoint={tmp}/any.ckpt", *CPU], "--output", "out.csv", False),
    "export.py": (export, ["--checkpoint={tmp}/any.ckpt", "--format=torch-export"], "--output", "out.pt2", False),
    "bench.py": (bench, ["--device=cpu"], "--json", "out.json", False),
    "prepare_data.py": (prepare_data, ["--data-dir={tmp}/images"], "--output", "out", True),
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_output_that_cannot_be_put_in_place_is_one_line_before_any_work(
    script: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, args, flag, name, folder = SCRIPTS[script]
    for split in ("train", "val"):
        for label in ("cats", "dogs"):
            (tmp_path / "images" / split / label).mkdir(parents=True)
    (tmp_path / "cat.png").write_bytes(b"never read: the output is refused first")
    (tmp_path / "any.ckpt").write_bytes(b"never read: the output is refused first")
    args = [arg.format(tmp=tmp_path) for arg in args]
    suffix = ".pt2" if script == "export.py" else ""  # the exporter's partial file keeps the format's suffix
    assert_each_refused(module, args, flag, name, folder, tmp_path, capsys, suffix)
