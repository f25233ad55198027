"""predict.py and export.py stopped as a terminal, `timeout` or a scheduler stops them (the signal to the whole process
group) end at once with 128 + the signal and leave nothing behind, killed outright too; a partial file that a crash
left is taken over by the next run; and two runs never write one output at the same time."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from .trained_model import run_script, trained_checkpoint

Held = list[tuple[Path, str]]
CPU = ["--accelerator=cpu", "--precision=32-true", "--num-workers=0"]


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Held]:
    return trained_checkpoint(tmp_path_factory.getbasetemp() / "tiny-classifier")


def stopped_once_writing(
    script: str, args: list[str], partial: Path, signum: int, then: float = 0
) -> subprocess.CompletedProcess[str]:
    """`python SCRIPT ARGS` in a session of its own, signalled as a group `then` seconds after its partial output
    appears."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(ROOT / script), *args]
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        deadline = time.monotonic() + 240
        while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(then)
        if proc.poll() is None:
            os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_predict_stopped_by_a_signal_to_its_group_exits_128_plus_it_and_writes_nothing(
    trained: tuple[Path, Held], tmp_path: Path, signum: int
) -> None:
    checkpoint, held = trained
    many = tmp_path / "many"
    many.mkdir()
    for i in range(5000):  # one image a batch: a minute of work, stopped in its first seconds
        os.link(held[i % len(held)][0], many / f"{i:04d}.png")
    output = tmp_path / "predictions.csv"
    args = [f"--checkpoint={checkpoint}", str(many), f"--output={output}", "--batch-size=1", *CPU]
    # the output is opened just before predicting starts: 3 s later the loop runs, under Lightning's own handlers
    result = stopped_once_writing("predict.py", args, tmp_path / ".predictions.csv.partial", signum, then=3)
    name = signal.Signals(signum).name
    assert result.returncode == 128 + signum, result.stderr[-3000:]
    assert (
        result.stderr.strip().splitlines()[-1]
        == f"predict.py: stopped by {name}; no output written, run the same command again"
    )
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many"], "no output, no partial file"


def test_predict_killed_outright_leaves_no_partial_file(trained: tuple[Path, Held], tmp_path: Path) -> None:
    """SIGKILL to the group, as `timeout -s KILL` or a scheduler's hard kill sends it: nothing of it can run after."""
    checkpoint, held = trained
    many = tmp_path / "many"
    many.mkdir()
    for i in range(2000):
        os.link(held[i % len(held)][0], many / f"{i:04d}.png")
    output = tmp_path / "predictions.csv"
    args = [f"--checkpoint={checkpoint}", str(many), f"--output={output}", "--batch-size=1", *CPU]
    result = stopped_once_writing("predict.py", args, tmp_path / ".predictions.csv.partial", signal.SIGKILL, then=3)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    deadline = time.monotonic() + 10
    while len(list(tmp_path.iterdir())) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many"], "no output, no partial file"


def test_export_stopped_by_sigterm_to_its_group_exits_143_and_leaves_no_file(
    trained: tuple[Path, Held], tmp_path: Path
) -> None:
    checkpoint, _ = trained
    output = tmp_path / "model.onnx"
    args = [f"--checkpoint={checkpoint}", "--format=onnx", f"--output={output}"]
    result = stopped_once_writing("export.py", args, tmp_path / ".model.onnx.partial.onnx", signal.SIGTERM)
    assert result.returncode == 143, result.stderr[-3000:]
    assert (
        result.stderr.strip().splitlines()[-1]
        == "export.py: stopped by SIGTERM; nothing written, run the same command again"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_partial_file_left_by_a_killed_run_is_taken_over_by_the_next(
    trained: tuple[Path, Held], tmp_path: Path
) -> None:
    checkpoint, held = trained
    output = tmp_path / "predictions.csv"
    (tmp_path / ".predictions.csv.partial").write_text("rows of a run killed with SIGKILL\n")
    result = run_script("predict.py", f"--checkpoint={checkpoint}", str(held[0][0]), f"--output={output}", *CPU)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.csv"]
    assert output.read_text().splitlines()[1].startswith(f"{held[0][0]},")


def test_a_second_run_writing_the_same_output_is_refused_in_one_line(
    trained: tuple[Path, Held], tmp_path: Path
) -> None:
    checkpoint, held = trained
    output = tmp_path / "predictions.csv"
    with open(tmp_path / ".predictions.csv.partial", "w") as first:  # what a run still writing holds
        fcntl.flock(first, fcntl.LOCK_EX)
        result = run_script("predict.py", f"--checkpoint={checkpoint}", str(held[0][0]), f"--output={output}", *CPU)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --output: another process is writing {output}; wait for it to finish, or give another --output"
    ]
    assert not output.exists()
