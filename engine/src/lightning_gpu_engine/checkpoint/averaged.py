"""Which weights of a checkpoint are used: its `state_dict`, for the final test and every tool alike.

Lightning's WeightAveraging (--ema, or a module's own from configure_callbacks) saves the average as `state_dict` and
keeps the raw weights beside it, for a resume to continue both. Lightning restores the raw ones into the module
whenever the averaging callback still holds the average of a fit, as it does in the Trainer that just fitted: the
final test would score the raw weights, while validation and the choice of the best checkpoint scored the average.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

# WeightAveraging's: the raw weights, and the average's own count of updates. Only a resume reads them.
TRAINING_COPY = ("current_model_state", "averaging_state")


def drop_training_copy(checkpoint: dict[str, Any]) -> None:
    """The checkpoint as testing and the tools read it: without the copy a resume continues, so that its weights are
    the average where one was kept."""
    for key in TRAINING_COPY:
        checkpoint.pop(key, None)


class UseTheAverage(Callback):
    """Outside fit, a checkpoint is read without its training copy. First among the callbacks, so that an averaging
    callback after it finds no raw weights to restore."""

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            drop_training_copy(checkpoint)
