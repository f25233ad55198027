"""Every stop signal of the project, in one place: Ctrl-C (SIGINT), SIGTERM (`timeout`, `scancel`, a time limit),
SIGHUP (a closed terminal) and SLURM's SIGUSR1 warning before a time limit.

- Training (`StopOnSignal`): finish the step, save a checkpoint every rank agrees on, stop; `--resume last` continues.
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
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

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


class StopOnSignal(Callback):
    """Ctrl-C, SIGTERM, SIGHUP, and SIGUSR1 unless SLURM's requeue has it: finish the step, save `path`, stop.

    The handler only notes the signal. A handler runs between any two bytecodes, inside a collective too, so one
    that communicates (Lightning's forwards SIGTERM to the other ranks and broadcasts) deadlocks DDP when `timeout`,
    `scancel` or a time limit signals the whole process group. After each optimizer step the ranks agree instead, in
    one all-reduce of one integer, and all of them tell Lightning at that step: it raises SIGTERMException on every
    rank at the same step's end, after any validation due there (held back until then, so a stop never interrupts
    it), and `on_exception` saves once with every rank taking part. Installed before the sanity check, so a stop
    during it ends as cleanly, and again for the final test, which stops after a batch (and saves nothing). Further
    signals are only noted; Ctrl-\\ still quits at once.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.signum: int | None = None
        self.saved = False
        self._step = -1
        self._stopping = False

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.signum, self.saved, self._stopping = None, False, False

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._install()

    # Lightning's teardown after fit puts the earlier handlers back: noted from then on too, and through the test
    on_fit_end = on_test_start = on_sanity_check_start

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._step = trainer.global_step
        if self._install():
            also = ", SIGUSR1 too" if signal.getsignal(signal.SIGUSR1) == self._note else ""
            rank_zero_info(
                f"Ctrl-C, SIGTERM or SIGHUP saves {self.path} after the current step{also}; --resume last continues."
            )

    def _install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():  # handlers belong to the main thread
            return False
        if signal.getsignal(signal.SIGTERM) != self._note:  # Lightning's teardown puts the earlier handlers back
            # SIGUSR1 is SLURM's warning before a time limit; where Lightning's requeue does not handle it, it would
            # kill the run unsaved
            usr1 = [signal.SIGUSR1] if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None) else []
            for signum in (*STOP_SIGNALS, *usr1):
                signal.signal(signum, self._note)
        return True

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.signum = self.signum or signum

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step != self._step:  # not between accumulated batches, whose gradients no checkpoint holds
            self._step = trainer.global_step
            self._agree(trainer)

    def on_test_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._agree(trainer)

    def _agree(self, trainer: L.Trainer) -> None:
        signum = self.signum or 0
        if trainer.world_size > 1 and torch.distributed.is_initialized():
            noted = torch.tensor(signum, device=trainer.strategy.root_device)
            torch.distributed.all_reduce(noted, op=torch.distributed.ReduceOp.MAX)
            signum = int(noted.item())
        if signum:
            self.signum, self._stopping = signum, True
            trainer._signal_connector.received_sigterm = True  # Lightning's stop at the end of this step

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer._signal_connector.received_sigterm = False  # or Lightning stops after its first batch

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer._signal_connector.received_sigterm = self._stopping

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        fitting = trainer.state.fn == TrainerFn.FITTING  # a test holds the tested weights, not the run's
        if isinstance(exception, SIGTERMException) and fitting and trainer.global_step > 0:
            trainer.save_checkpoint(self.path, weights_only=False)
            self.saved = True
