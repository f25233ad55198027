"""kill -9 of a run's main process (what the OOM killer does) leaves nothing that keeps a restart out: its loader
workers die with it, and a restart waits, saying so, for any process that still holds the lock the dead run took,
never naming the dead run as "using" the directory."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from .conftest import TOY, run_toy
from .test_stops import WORKERS, Run, runs  # noqa: F401  # runs: the fixture that reaps what a test started

PR_SET_CHILD_SUBREAPER = 36  # Linux's prctl(2) option: orphans of this process's tree are reparented to it


@contextlib.contextmanager
def adopting_orphans() -> Iterator[None]:
    """This process adopts what the processes it starts leave orphaned, so it can wait for them and read how they
    ended, instead of giving them some seconds to be gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)", which may hold spaces
        except OSError:  # ended while listed
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_the_loader_workers_die_with_the_main_process_and_a_restart_is_not_refused(
    my_task: Path,
    runs: list[Run],  # noqa: F811  # the fixture imported above
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    args = [*TOY, "--samples=65536", f"--num-workers={WORKERS}", f"--output-dir={out}"]
    with adopting_orphans():
        run = Run(my_task, *args)
        runs.append(run)
        run.wait_for("epoch 1/")  # a step is done: the loader workers are up, holding what they inherited
        workers = children_of(run.process.pid)  # the training loader's, and validation's kept from the sanity check
        assert len(workers) >= WORKERS, workers
        os.kill(run.process.pid, signal.SIGKILL)  # the main process alone, as the OOM killer picks it
        assert run.process.wait() == -signal.SIGKILL
        # Orphaned, the workers are this process's to wait for: the kernel's SIGKILL at their parent's death ends
        # them (PR_SET_PDEATHSIG), not their own check for a lost parent, every 5 s, which would exit them with 0
        for worker in workers:
            _, status = os.waitpid(worker, 0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"worker {worker}: {status}"
    restarted = run_toy(my_task, *args, "--resume=auto", "--max-steps=3")
    assert restarted.returncode == 0, restarted.stderr[-3000:]


def test_a_lock_held_after_its_run_ended_is_waited_for_and_the_dead_run_is_not_named(
    my_task: Path,
    runs: list[Run],  # noqa: F811  # the fixture imported above
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (out / ".lock").write_text(ended.stdout.strip())  # the pid of a run that has ended
    holder = subprocess.Popen(  # what it started, holding the lock until the test closes its stdin
        [sys.executable, "-c", f"import fcntl, sys; f = open({str(out / '.lock')!r}, 'a'); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    waited = f"note: the run that used {out} (pid {ended.stdout.strip()}) has ended; waiting for what it started"
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        restarted = Run(my_task, *TOY, "--max-steps=3", "--resume=auto", f"--output-dir={out}")
        runs.append(restarted)
        restarted.wait_for(waited)  # it says so, and waits
    finally:
        holder.communicate("")  # the lock let go, as the dead run's last process ends
    code, output = restarted.finish()
    assert code == 0, output[-3000:]
    assert "is using" not in output
