"""Every entry point of the language model that writes a file or a folder (generate.py, train_tokenizer.py, export.py,
prepare_data.py, bench.py) opens its output through the engine's one checked path before its work: a folder where a
file goes, a file where a folder goes, a missing or read-only place, or another run writing the same output is one
line naming the flag, exit 2, and nothing written."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from unusable_outputs import assert_each_refused

import bench
import export
import generate
import prepare_data
import train_tokenizer

# script: (its module, its arguments, the output's flag, its name, whether it is a folder)
SCRIPTS: dict[str, tuple[ModuleType, list[str], str, str, bool]] = {
    "generate.py": (generate, ["--checkpoint={tmp}/any.ckpt", "--prompt=x"], "--output", "out.jsonl", False),
    "train_tokenizer.py": (train_tokenizer, ["--data-dir={tmp}/texts"], "--output", "out.json", False),
    "bench.py": (bench, ["--device=cpu"], "--json", "out.json", False),
    "export.py": (export, ["--checkpoint={tmp}/any.ckpt"], "--output", "out", True),
    "prepare_data.py": (prepare_data, ["--data-dir={tmp}/texts"], "--output", "out", True),
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_output_that_cannot_be_put_in_place_is_one_line_before_any_work(
    script: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, args, flag, name, folder = SCRIPTS[script]
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("some text to learn from\n")
    (tmp_path / "any.ckpt").write_bytes(b"never read: the output is refused first")
    args = [arg.format(tmp=tmp_path) for arg in args]
    assert_each_refused(module, args, flag, name, folder, tmp_path, capsys)
