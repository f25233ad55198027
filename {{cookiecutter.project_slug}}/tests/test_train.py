"""End to end on CPU, as a user runs it. DDP, resume and failures have their own files."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import run_train


def test_fast_dev_run_end_to_end_as_a_user_runs_it(tiny_args: list[str], tmp_path: Path) -> None:
    result = run_train(*tiny_args, "--fast-dev-run")
    assert result.returncode == 0, result.stderr[-3000:]
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    # channels_last is the bake's default (tiny_args leaves it alone); CPU turns compile off.
    expected = f"hardware: cpu x1 | precision=32-true compile=False channels_last={saved['channels_last']}"
    assert expected in result.stdout
    assert "test/acc=" in result.stdout
    assert saved["image_size"] == 16 and saved["fast_dev_run"] is True
