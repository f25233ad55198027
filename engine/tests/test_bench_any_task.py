"""`python -m lightning_gpu_engine bench --task` (a project's `bench.py --task`) on the guide's regressor: a team's
own task timed for each precision x compile setting, built through its TASK, each row printed and saved as it is
measured; a task that cannot be found is one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_gpu_engine.testing import processes, warm_starts

from .conftest import guide_task

SMALL = ["--accelerator=cpu", "--precision=32-true", "--num-workers=0", "--batch-size=32", "--samples=256"]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("team")
    (folder / "my_task.py").write_text(guide_task())
    return folder


def bench(team: Path, *args: str) -> subprocess.Popen[str]:
    """`python -m lightning_gpu_engine bench ARGS` from the team's folder, as its members run it."""
    env = processes.script_env(team)
    command = [sys.executable, "-m", "lightning_gpu_engine", "bench", *args]
    return warm_starts.popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=team, env=env)


def test_the_guides_regressor_gets_a_samples_per_second_row_per_setting_and_round(team: Path) -> None:
    out = team / "bench.json"
    timed = ["--only=fp32,bf16", "--repeat=2", "--warmup=1", "--steps=5", f"--json={out}"]
    process = bench(team, "--task", "my_task", *timed, *SMALL)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["finished"] and saved["task"] == "a tabular regressor" and saved["accelerator"] == "cpu"
    assert (
        saved["torch"]
        and saved["lightning"]
        and saved["command"].startswith("python -m lightning_gpu_engine bench --task my_task")
    )
    rows = [(row["name"], row["default"], row["round"]) for row in saved["settings"]]
    assert rows == [("fp32", True, 0), ("bf16", False, 0), ("fp32", True, 1), ("bf16", False, 1)], "in turn"
    for row in saved["settings"]:
        assert row["samples_per_s"] > 0 and len(row["windows"]) == 5 and row["batch_size"] == 32, row
        assert row["cpu_step_ms"] > 0, "the process's CPU time per step, which other programs do not inflate"
        assert row["flops_per_batch"] > 0, "the task's own module, built through its TASK, counted its FLOPs"
        assert row["mfu"] is None and row["items_per_s"] is None, "no CPU peak; the regressor counts no items"
    assert re.search(r"^setting\s+samples/s\s+spread\s+x fp32\s+step ms\s+CPU ms", stdout, re.M), stdout
    assert re.search(r"^fp32 \(default\)\s+\d+\.\d\s+\d+%\s+1\.00\s.*n/a\s+n/a$", stdout, re.M), stdout
    assert re.search(r"^bf16\s+\d+\.\d\s+\d+%\s+\d\.\d\d\s", stdout, re.M), stdout
    assert re.search(r"^bf16 #2\s+\d+\.\d\s+\d+%\s+\d\.\d\d\s", stdout, re.M), stdout
    for clock in ("wall clock", "CPU time"):
        assert re.search(rf"^bf16: \d\.\d+x fp32 by {clock} \(median of 2 interleaved rounds: ", stdout, re.M), stdout


def test_the_settings_offered_and_a_task_that_cannot_be_found_are_one_line(team: Path) -> None:
    (team / "no_task.py").write_text("RATE = 1\n")
    cases = {
        ("--task", "my_task", "--only=fp64", *SMALL): "error: --only: 'fp64' is not one of: fp32, fp32+compile, bf16, "
        "bf16+compile",
        ("--task", "no_such_task"): "error: --task: no module named 'no_such_task'; give a module importable from here",
        ("--task", "no_task.py"): "error: --task: no_task.py has no TASK; define TASK = Task(...) in it",
        ("--task", "my_task", "--hidden=0"): "error: --hidden: must be a positive integer, got 0",
    }
    started = [(bench(team, *args), want) for args, want in cases.items()]
    for process, want in started:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 2 and stderr.startswith(want) and stderr.count("\n") == 1, (want, stderr)
        assert stdout == ""
