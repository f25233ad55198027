"""kill -9 of a run's main process (what the OOM killer does) leaves nothing that keeps a restart out: its loader
workers die with it, and a restart waits, saying so, for any process that still holds the lock the dead run took,
never naming the dead run as "using" the directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .conftest import TOY, run_toy
from .test_stops import WORKERS, Run, runs  # noqa: F401  # runs: the fixture that reaps what a test started


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. A zombie does not count: it holds nothing, and where the container's
    init never reaps orphans (CI's did not), a dead worker stays one for good."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)", which may hold spaces
        except OSError:  # ended while listed
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_the_loader_workers_die_with_the_main_process_and_a_restart_is_not_refused(
    my_task: Path,
    runs: list[Run],  # noqa: F811  # the fixture imported above
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    args = [*TOY, "--samples=65536", f"--num-workers={WORKERS}", f"--output-dir={out}"]
    run = Run(my_task, *args)
    runs.append(run)
    run.wait_for("epoch 1/")  # a step is done: the loader workers are up, holding what they inherited
    os.kill(run.process.pid, signal.SIGKILL)  # the main process alone, as the OOM killer picks it
    assert run.process.wait() == -signal.SIGKILL
    # The workers ignore stop signals, and on their own notice the loss of their parent at their next check (5 s)
    deadline = time.monotonic() + 2
    while group_alive(run.process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(run.process.pid), "a loader worker outlived the main process"
    restarted = run_toy(my_task, *args, "--resume=auto", "--max-steps=3")
    assert restarted.returncode == 0, restarted.stderr[-3000:]


def test_a_lock_held_after_its_run_ended_is_waited_for_and_the_dead_run_is_not_named(
    my_task: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (out / ".lock").write_text(ended.stdout.strip())  # the pid of a run that has ended
    holder = subprocess.Popen(  # what it started, still holding the lock for a while
        [sys.executable, "-c", f"import fcntl, time; f = open({str(out / '.lock')!r}, 'a'); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(12)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        restarted = run_toy(my_task, *TOY, "--max-steps=3", "--resume=auto", f"--output-dir={out}")
    finally:
        holder.kill()
        holder.wait()
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    waited = f"note: the run that used {out} (pid {ended.stdout.strip()}) has ended; waiting for what it started"
    assert waited in restarted.stdout
    assert "is using" not in restarted.stderr
