"""`--val-every STEPS`: validation every STEPS optimizer steps, counted across epochs, whatever the accumulation.

Lightning's `val_check_interval` counts batches since the run began. With gradient accumulation an epoch may end in a
shorter optimizer step (Lightning steps on an epoch's last batch), and a resume with another split of the same global
batch (resume_changes.py) converts the epoch's place but not that count: either way a validation in batches drifts
off the steps, and lands between accumulated batches, whose gradients no checkpoint holds. So the check is made on the
optimizer step instead. Lightning asks the same check when it resumes, to tell whether the checkpoint's step had its
validation (it then neither runs it again nor loses it), which this one answers from the same restored counters.
"""

from __future__ import annotations

from typing import Any

import lightning as L


def validate_every(trainer: L.Trainer, steps: int) -> None:
    """Validate after each optimizer step that is a multiple of `steps`, never between accumulated batches."""
    loop = trainer.fit_loop.epoch_loop

    def due(data_fetcher: Any) -> bool:
        # _should_check_val_epoch: a validation loader with batches to run; _should_accumulate: this batch (or, just
        # resumed, the checkpoint's last one) did not step the optimizer
        return loop._should_check_val_epoch() and not loop._should_accumulate() and loop.global_step % steps == 0

    loop._should_check_val_fx = due  # type: ignore[method-assign]
