"""What a step is: one training batch that stepped the optimizers, whatever the module's shape. --max-steps,
--val-every and --checkpoint-every count these, and so does `trainer.global_step`.

In automatic optimization Lightning counts one step per optimizer step, which is one per batch, or one per
--accumulate-grad-batches batches. Under manual optimization it counts every `optimizer.step()`: a GAN stepping its
generator and its discriminator in each batch made two steps a batch, so `--max-steps 12` trained 6 batches and
`--checkpoint-every 7steps` saved every 14 (global_step is always even there). Here a batch that steps any of the
module's optimizers, however many, is one step, as `trainer.estimated_stepping_batches` already counts it.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loops.optimization.manual import _ManualOptimization


class OneStepPerBatch(_ManualOptimization):
    """Lightning's manual-optimization loop, counting the first optimizer step of each batch only. The count is
    Lightning's own progress tracker, so checkpoints save it and a resume restores it as before."""

    def __init__(self, trainer: L.Trainer) -> None:
        super().__init__(trainer)
        self._stepped = False  # in the batch being run

    def on_run_start(self) -> None:
        self._stepped = False
        super().on_run_start()

    def _on_before_step(self) -> None:
        if not self._stepped:
            self.optim_step_progress.increment_ready()
        self.trainer.profiler.start("optimizer_step")  # type: ignore[attr-defined]

    def _on_after_step(self) -> None:
        self.trainer.profiler.stop("optimizer_step")  # type: ignore[attr-defined]
        if not self._stepped:
            self.optim_step_progress.increment_completed()
            self._stepped = True


def count_batches(trainer: L.Trainer) -> None:
    """A Trainer whose manual optimization counts one step per batch (its automatic optimization already does)."""
    loop = trainer.fit_loop.epoch_loop
    loop.manual_optimization = OneStepPerBatch(trainer)
