"""Guards around training: enough data for one batch per device, a stop at the first nan or inf loss, and the
batch-size search. Failures once a run has started are told in one line by run.py (`explain_failures`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from lightning_gpu_engine.checkpoint.saving import NonFiniteWeightsError, non_finite_tensors
from lightning_gpu_engine.config.values import ConfigError


def check_enough_data(
    datamodule: L.LightningDataModule, batch_size: int, world_size: int, unit: str = "samples"
) -> None:
    """A training set smaller than one batch per device trains nothing (drop_last) and would still exit 0."""
    datamodule.setup("fit")
    size = len(datamodule.train_dataloader().dataset)  # type: ignore[arg-type]
    if size // world_size < batch_size:
        per = f" over {world_size} devices" if world_size > 1 else ""
        raise ConfigError(
            "batch_size",
            f"{batch_size} is more than the {size} training {unit}{per}: nothing would "
            f"be trained; use --batch-size {max(1, size // world_size)} or less, or more {unit}",
        )


class NonFiniteLossError(RuntimeError):
    def __init__(self, step: int) -> None:
        super().__init__(f"the training loss became nan or inf at step {step}")


class FiniteLossGuard(Callback):
    """Stops at the first nan or inf training loss, before any checkpoint is written with the weights it produced.

    Each step only updates a flag on the device. The flag is read every `every_n_steps` steps (pass the logging
    interval: logging waits for the GPU then anyway) and before every checkpoint, so ordinary steps get no extra
    GPU-to-CPU synchronisation. A training_step that returns no loss (a manual-optimization GAN's returns nothing,
    and Lightning hands callbacks `{}`) leaves the weights check of every save to guard its run.
    """

    def __init__(self, every_n_steps: int) -> None:
        self.every_n_steps = every_n_steps
        self._first_bad: torch.Tensor | None = None  # the step of the first non-finite loss, -1 while there is none

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if not isinstance(loss, torch.Tensor):
            return
        if self._first_bad is None:
            self._first_bad = torch.full((), -1, dtype=torch.long, device=loss.device)
        newly_bad = ~torch.isfinite(loss.detach()) & (self._first_bad < 0)
        self._first_bad = torch.where(newly_bad, trainer.global_step, self._first_bad)
        if trainer.global_step % self.every_n_steps == 0:
            self._check(trainer)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._check(trainer)
        # A save due at this very step can come before this step's loss is looked at (the callbacks' order), so the
        # weights themselves are checked too, on every rank, and all refuse together
        bad = non_finite_tensors(checkpoint["state_dict"])
        if trainer.strategy.reduce_boolean_decision(bool(bad), all=False):
            raise NonFiniteWeightsError(trainer.global_step, bad or ["on another rank"])

    def _check(self, trainer: L.Trainer) -> None:
        step = -1 if self._first_bad is None else int(self._first_bad.item())
        if trainer.strategy.reduce_boolean_decision(step >= 0, all=False):  # all ranks stop at the same step
            raise NonFiniteLossError(step if step >= 0 else trainer.global_step)


def scale_batch_size(trainer: L.Trainer, model: L.LightningModule, datamodule: L.LightningDataModule) -> int:
    """The largest power-of-two multiple of --batch-size whose training steps fit in memory, by Lightning's finder.

    Powers of two keep the batch a multiple of 8, which tensor cores want; the search stops at the data set size.
    """
    from lightning.pytorch.tuner import Tuner

    start = datamodule.hparams["batch_size"]
    found = Tuner(trainer).scale_batch_size(model, datamodule=datamodule, mode="power", init_val=start)
    size = int(found or start)
    if trainer.is_global_zero:
        print(f"auto batch size: {size} per device fits (started from {start})")
    return size
