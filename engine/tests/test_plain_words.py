"""Runs that end without a number to report say so plainly, and no run prints an alarming line it need not: a step
budget that ends inside the first epoch, and `--profile` on a CPU machine with a CUDA build of torch."""

from __future__ import annotations

from pathlib import Path

from .conftest import TOY, run_toy


def test_a_step_budget_inside_the_first_epoch_says_no_validation_ran(my_task: Path, tmp_path: Path) -> None:
    done = run_toy(my_task, *TOY, "--samples=2048", "--max-steps=3", f"--output-dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith("no validation ran (training ended at step 3, before the first epoch's end): ")
    assert "nan" not in summary.split("test/loss=")[0]
    assert "could not find the monitored key" not in done.stdout + done.stderr


def test_profile_on_a_cpu_writes_its_trace_without_an_error_line(my_task: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_toy(my_task, *TOY, "--samples=2048", "--profile", f"--output-dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ERROR" not in done.stdout + done.stderr
    assert (out / "profile" / "trace.json").stat().st_size > 0
    assert "Self CPU" in (out / "profile" / "kernels.txt").read_text()
