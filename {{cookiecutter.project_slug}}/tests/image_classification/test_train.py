"""End to end on CPU, as a user runs it. DDP, resume and failures have their own files."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import run_train


def test_fast_dev_run_end_to_end_as_a_user_runs_it(tiny_args: list[str], tmp_path: Path) -> None:
    result = run_train(*tiny_args, "--fast-dev-run")
    assert result.returncode == 0, result.stderr[-3000:]
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    # channels_last is the bake's default (tiny_args leaves it alone): on a CPU, off either way; so is compile.
    expected = "hardware: cpu x1 | precision=32-true compile=False channels_last=False"
    assert expected in result.stdout
    assert "test/acc=" in result.stdout
    assert "val/acc=nan" not in result.stdout and "throughput=n/a" not in result.stdout  # one step has a speed too
    assert saved["image_size"] == 16 and saved["fast_dev_run"] is True
    assert "data_dir" not in saved and "decode" not in saved, "options synthetic data does not read"


def test_a_log_file_gets_the_hardware_first_plain_progress_lines_and_epoch_summaries(
    tiny_args: list[str], tmp_path: Path
) -> None:
    """What a SLURM .out file or a CI log shows: stdout is a pipe here, as there."""
    result = run_train(*tiny_args, "--max-epochs=2")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("hardware: cpu x1 | precision=32-true")  # before Lightning's banners
    assert "litlogger" not in result.stdout + result.stderr and "💡" not in result.stdout + result.stderr
    assert "LeafSpec" not in result.stderr, "known third-party deprecation noise (quiet.py) is silenced"
    for epoch in (1, 2):  # a line once the first step is done, whatever the pace, and one when the epoch ends
        assert any(line.startswith(f"epoch {epoch}/2  batch 1/4  step {4 * epoch - 3}  train/loss=") for line in lines)
        summary = next(line for line in lines if line.startswith(f"epoch {epoch}/2 done in "))
        assert f"step {4 * epoch}: train/loss=" in summary and " val/acc=" in summary
    final = lines[-1]
    assert final.startswith("best val/acc=") and "nan" not in final and "n/a" not in final
    assert "\r" not in result.stdout  # no progress bar redrawn over itself in the file
