"""predict.py and export.py stopped as a terminal, `timeout` or a scheduler stops them (the signal to the whole process
group) end at once with 128 + the signal and leave nothing behind, killed outright too; a partial file that a crash
left is taken over by the next run; and two runs never write one output at the same time."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, wait_until
from lightning_gpu_engine import testing

from .trained_model import run_script, trained_checkpoint

Held = list[tuple[Path, str]]
CPU = ["--accelerator=cpu", "--precision=32-true", "--num-workers=0"]


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Held]:
    return trained_checkpoint(tmp_path_factory.getbasetemp() / "tiny-classifier")


def stopped_once_writing(
    script: str, args: list[str], signum: int, partial: Path | None = None, said: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`python SCRIPT ARGS` in a session of its own, signalled as a group once its `partial` output appears, or once
    it `said` something on stderr."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(ROOT / script), *args]
    with testing.popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        heard: list[str] = []
        if partial is not None:
            wait_until(partial.exists, proc, partial.name)
        else:
            assert proc.stderr is not None and said is not None
            for line in proc.stderr:
                heard.append(line)
                if said in line:
                    break
            else:
                pytest.fail(f"{script} ended without saying {said!r}:\n{''.join(heard)[-3000:]}")
        if proc.poll() is None:
            os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(command, proc.returncode, out, "".join(heard) + err)


def many_images(held: Held, folder: Path, count: int) -> Path:
    """`count` images, the third unreadable: predict.py warns of it from inside its predicting loop, where Lightning's
    own signal handlers are in place, and a test signals it there."""
    folder.mkdir()
    for i in range(count):
        os.link(held[i % len(held)][0], folder / f"{i:04d}.png")
    (folder / "0002.png").unlink()
    (folder / "0002.png").write_bytes(b"not a png")
    return folder


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_predict_stopped_by_a_signal_to_its_group_exits_128_plus_it_and_writes_nothing(
    trained: tuple[Path, Held], tmp_path: Path, signum: int
) -> None:
    checkpoint, held = trained
    many = many_images(held, tmp_path / "many", 5000)  # one image a batch: a minute of work, stopped at its third
    output = tmp_path / "predictions.csv"
    args = [f"--checkpoint={checkpoint}", str(many), f"--output={output}", "--batch-size=1", *CPU]
    result = stopped_once_writing("predict.py", args, signum, said="skipping unreadable image")
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
    many = many_images(held, tmp_path / "many", 5000)  # a minute of work: the kill lands long before its end
    output = tmp_path / "predictions.csv"
    args = [f"--checkpoint={checkpoint}", str(many), f"--output={output}", "--batch-size=1", *CPU]
    result = stopped_once_writing("predict.py", args, signal.SIGKILL, said="skipping unreadable image")
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    # the partial file's watcher, a process of its own, removes it once it sees its writer gone
    wait_until(lambda: sorted(p.name for p in tmp_path.iterdir()) == ["many"], None, "no output and no partial file")


def test_export_stopped_by_sigterm_to_its_group_exits_143_and_leaves_no_file(
    trained: tuple[Path, Held], tmp_path: Path
) -> None:
    checkpoint, _ = trained
    output = tmp_path / "model.onnx"
    args = [f"--checkpoint={checkpoint}", "--format=onnx", f"--output={output}"]
    result = stopped_once_writing("export.py", args, signal.SIGTERM, partial=tmp_path / ".model.onnx.partial.onnx")
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
