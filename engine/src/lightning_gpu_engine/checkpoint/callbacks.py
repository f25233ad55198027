"""When the engine saves: the best and last checkpoints of Lightning's ModelCheckpoint, following a moved
--output-dir, and the periodic mid-epoch saves of --checkpoint-every."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint


class RunCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint, following its run when the --output-dir was moved or copied (scratch to project
    storage, a renamed folder): Lightning restores only the old absolute best path then, so the best score was lost
    (a TypeError after the resumed run's test) and the old folder's best checkpoint was tested, or was missing."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old, new = state_dict.get("dirpath"), self.dirpath
        if old and new and old != new and Path(new, Path(state_dict.get("best_model_path") or "-").name).exists():

            def moved(path: str) -> str:
                return str(Path(new, Path(path).name)) if path else path

            state_dict = {
                **state_dict,
                "dirpath": new,
                **{k: moved(state_dict[k]) for k in ("best_model_path", "kth_best_model_path", "last_model_path")},
                "best_k_models": {moved(k): v for k, v in state_dict.get("best_k_models", {}).items()},
            }
        super().load_state_dict(state_dict)


class PeriodicCheckpoint(Checkpoint):
    """Saves `path` every `every_steps` optimizer steps and/or `every_seconds` of wall time, mid-epoch included.

    Steps are counted alike on every rank. Time is read on rank 0, and only on logging steps under DDP, where the
    ranks then agree by one broadcast: asking every step would make every step wait for the slowest rank. A save due
    at a step that `val_every` (--val-every) validates at waits for that validation's end: resumed from a save before
    it, Lightning would take the validation as done, and the best checkpoint would never see its score. One due at an
    epoch's last batch waits for the epoch's end, after its validation: killed in that validation, a run resumed from
    a save before it took the epoch as over, and skipped the validation and the epoch's end. As a
    `Checkpoint`, Lightning runs it after the ModelCheckpoints, so the save holds what they made of the validation,
    and `SaveAfterHooks` runs it after the module's own hook of that moment (after_hooks.py).
    """

    def __init__(
        self,
        path: Path,
        every_steps: int | None,
        every_seconds: float | None,
        log_every_n_steps: int,
        val_every: int | None,
    ):
        self.path, self.every_steps, self.every_seconds = path, every_steps, every_seconds
        self.log_every_n_steps, self.val_every = log_every_n_steps, val_every
        self.last_saved = time.monotonic()
        self.seen_step = -1
        self.after_validation = False
        self.at_epoch_end = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.last_saved, self.seen_step = time.monotonic(), trainer.global_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.checkpoint_callback is None or getattr(trainer, "fast_dev_run", False):
            return  # checkpointing is off (bench, profile, fast-dev-run)
        step = trainer.global_step
        if step == self.seen_step:  # accumulating gradients: they are not in a checkpoint, so never save here
            return
        self.seen_step = step
        due = self.every_steps is not None and step % self.every_steps == 0
        ask_clock = trainer.world_size == 1 or step % self.log_every_n_steps == 0
        if self.every_seconds is not None and not due and ask_clock:
            late = time.monotonic() - self.last_saved >= self.every_seconds
            due = bool(trainer.strategy.broadcast(late)) if trainer.world_size > 1 else late
        if due and trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self.at_epoch_end = True
        elif due and self.val_every and step % self.val_every == 0 and trainer.enable_validation:
            self.after_validation = True
        elif due:
            trainer.save_checkpoint(self.path, weights_only=False)
            self.last_saved = time.monotonic()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.after_validation and not trainer.sanity_checking:
            self.after_validation = False
            trainer.save_checkpoint(self.path, weights_only=False)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.at_epoch_end:
            self.at_epoch_end = False
            trainer.save_checkpoint(self.path, weights_only=False)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self.last_saved = time.monotonic()  # an epoch-end save restarts the clock too
