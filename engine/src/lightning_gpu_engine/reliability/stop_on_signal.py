"""`StopOnSignal`, training's side of signals.py: apart so that the entry points' stops, and a bad flag's exit, import
no Lightning (seconds of every one-line error)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.tools.signals import STOP_SIGNALS, Waiting, handing_over


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
        self._stepped = False  # the last batch ended an optimizer step: nothing is accumulated that a save would lose
        self._stopping = False
        self._alone = False  # one process: a stop needs no agreement, and may end a wait for data (signals.Waiting)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.signum, self.saved, self._stopping = None, False, False

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._install()

    # Lightning's teardown after fit puts the earlier handlers back: noted from then on too, and through the test
    on_fit_end = on_test_start = on_sanity_check_start

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._step, self._stepped = trainer.global_step, False
        self._alone = trainer.world_size == 1
        Waiting.begins = self._act_if_noted
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
        # a stalled read from object storage, say: the batch before it ended an optimizer step, and no rank has to agree
        if Waiting.now and self._alone and self._stepped and not handing_over(frame):
            self._stopping = True
            raise SIGTERMException  # on_exception saves

    def _act_if_noted(self) -> None:
        """A wait for the next batch begins (signals.Waiting): a stop noted after this step's agreement, by a later
        callback of the step say, stops here, before the read, which may be an outage's."""
        if self.signum and self._alone and self._stepped and not self._stopping:
            self._stopping = True
            raise SIGTERMException  # on_exception saves

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        Waiting.begins = None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._stepped = trainer.global_step != self._step
        if self._stepped:  # not between accumulated batches, whose gradients no checkpoint holds
            self._step = trainer.global_step
            self._agree(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stepped = False  # the next epoch's first wait: its loops' counters are not a step's end until it ends

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
        Waiting.begins = None
        fitting = trainer.state.fn == TrainerFn.FITTING  # a test holds the tested weights, not the run's
        # A data failure told in one line (an object store's outage) while the next training batch was read: the step
        # before is complete, so it is saved, and --resume last loses nothing; a stop noted meanwhile is honoured too
        reading = not (trainer.validating or trainer.sanity_checking) and self._alone and self._stepped
        failed_reading = isinstance(exception, ConfigError) and reading
        if (isinstance(exception, SIGTERMException) or failed_reading) and fitting and trainer.global_step > 0:
            trainer.save_checkpoint(self.path, weights_only=False)
            self.saved = True
