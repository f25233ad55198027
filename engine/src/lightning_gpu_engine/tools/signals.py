"""Every stop signal of the project, in one place: Ctrl-C (SIGINT), SIGTERM (`timeout`, `scancel`, a time limit),
SIGHUP (a closed terminal) and SLURM's SIGUSR1 warning before a time limit.

- Training (`StopOnSignal`, stop_on_signal.py, the one part that needs Lightning): finish the step, save a checkpoint
  every rank agrees on, stop; `--resume last` continues.
- Loader workers (`held_back` while they start, then `ignore_stop_signals`): leave the signals to the main process,
  which saves first.
- Entry points that do not train (`run_stoppable`, predict.py and export.py): stop at once, remove what was half
  written, exit with 128 + the signal's number, as a shell and a scheduler expect.
- Shutdown (`ignore_while_exiting`): a further signal while Python exits keeps the exit code already chosen.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WORKER_IGNORES = (*STOP_SIGNALS, signal.SIGUSR1)  # SIGUSR1: SLURM's pre-emption warning, handled by Lightning
PR_SET_PDEATHSIG = 1  # Linux's prctl(2) option: the signal a process gets when its parent ends
STARTED_BY = os.getpid()  # in a forked loader worker: the training process, whose module state it inherited


def ignore_stop_signals(worker_id: int) -> None:
    """A loader worker's `worker_init_fn`: stop signals are the main process's to handle.

    `timeout`, `scancel` and a terminal's hangup signal the whole process group. A worker killed by SIGTERM makes the
    main process raise from inside whatever it was doing, before it can save; ignoring it, the worker runs on until
    the main process has saved and shuts it down (or exits, which workers notice within seconds).
    """
    for signum in WORKER_IGNORES:  # ignoring discards what `held_back` kept pending since the fork
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WORKER_IGNORES)
    die_with_parent()
    if os.environ.get("PL_SEED_WORKERS") == "1":  # what Lightning adds when a loader has no worker_init_fn
        from lightning.fabric.utilities.seed import pl_worker_init_function

        pl_worker_init_function(worker_id)


@contextmanager
def held_back() -> Iterator[None]:
    """Stop signals wait while a loader worker starts (see `loaders.worker_context`); this process gets them after.

    A child inherits the signal mask. Between the fork and `ignore_stop_signals`, PyTorch's worker installs its own
    SIGTERM handler, which exits: a group's SIGTERM landing there killed the worker, and the training step waiting
    for its batch raised instead of saving. A forkserver started here inherits the mask too, through its exec.
    """
    before = signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_IGNORES)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def die_with_parent() -> None:
    """A loader worker ends the moment its training process does, even by kill -9 (the OOM killer). Otherwise it lives
    on for seconds, until it notices, holding what it inherited: the --output-dir lock that a restart waits for."""
    if not sys.platform.startswith("linux") or os.getpid() == STARTED_BY:  # forkserver: a fresh interpreter's child
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != STARTED_BY:  # the parent died before the line above: nothing will signal this process
        os._exit(0)


def end_with_launcher() -> None:
    """A rank that a launcher started (Lightning's starts ranks 1..N, torchrun every rank: LOCAL_RANK is set before
    the process begins) ends when its launcher does, even by kill -9. Rank 0 ending on an error (a dead S3 endpoint
    in the final test) left the others waiting in a collective for the process group's 30 minutes."""
    if "LOCAL_RANK" in os.environ and sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Waiting:
    """Whether the main process is waiting for loader workers to hand it the next training batch (`waiting_for`).
    There it holds nothing half-done: no batch is being read in it, and the step before is complete. A read from
    object storage can stall for minutes (object_storage.py), so a stop signal noted there is acted on at once
    (stop_on_signal.py) instead of after the read's time limit, which a scheduler's grace period may not outlast;
    and one noted since the step's agreement, as a wait begins (`begins`): else the read's outage ended the run
    unsaved, exit 2."""

    now = False
    begins: Callable[[], None] | None = None  # StopOnSignal's, while it trains


# Where a worker's batch is handed over: the main process fetches each tensor's file descriptor from the worker over a
# socket. Raised out of there, the stop leaves the worker's end of it broken, and the worker prints a traceback.
HANDOVER = (
    os.path.join("multiprocessing", "resource_sharer.py"),
    os.path.join("torch", "multiprocessing", "reductions.py"),
)


def handing_over(frame: FrameType | None) -> bool:
    """Whether the interrupted `frame` is receiving a batch, not waiting for one: the batch is moments away, and the
    step after it stops as any other does."""
    while frame is not None:
        if frame.f_code.co_filename.endswith(HANDOVER):
            return True
        frame = frame.f_back
    return False


@contextmanager
def waiting_for() -> Iterator[None]:
    Waiting.now = True
    try:
        if Waiting.begins is not None:
            Waiting.begins()
        yield
    finally:
        Waiting.now = False


class Stopped(BaseException):  # a BaseException, as KeyboardInterrupt is: `except Exception` must not swallow it
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def run_stoppable(main: Callable[[], object], script: str, lost: str) -> None:
    """`main()` with the stop signals raising Stopped; a stop ends the process in one line, with 128 + the signal."""
    previous = {signum: signal.signal(signum, _raise) for signum in STOP_SIGNALS}
    try:
        main()
    except Stopped as stop:  # what was half-written is already removed, by the finally blocks it went through
        print(f"{script}: stopped by {stop}; {lost}, run the same command again", file=sys.stderr)
        raise SystemExit(128 + stop.signum) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def ignore_while_exiting() -> None:
    """A further signal while Python shuts down (loader workers, logger threads) keeps the exit code."""
    for signum in WORKER_IGNORES:
        signal.signal(signum, signal.SIG_IGN)
