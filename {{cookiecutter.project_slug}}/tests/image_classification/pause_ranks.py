"""`python tests/image_classification/pause_ranks.py DUMP_DIR PAUSE_STEP TRAIN_ARGS...`: dump_ranks.py, plus the
epoch metrics so far.

After every step, rank 0 notes each metric's value over the epoch so far in DUMP_DIR/running.pt, so tests can pick a
step where the two halves of an epoch differ. With PAUSE_STEP > 0 every rank stops after that step's callbacks (a
periodic checkpoint included) and waits to be killed, once rank 0 has printed "paused at step PAUSE_STEP".
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint
from lightning_gpu_engine.testing import DumpRank, trainers_with
from torchmetrics import Metric

import train


class RunningMetrics(Checkpoint):  # Lightning runs checkpoint callbacks last: the pause comes after the periodic save
    def __init__(self, folder: Path, pause_step: int) -> None:
        self.folder, self.pause_step = folder, pause_step
        self.running: dict[int, dict[str, float]] = {}

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # compute() syncs the ranks' states, so every rank computes, in the same order
        metrics = [(name, m) for name, m in pl_module.named_modules() if isinstance(m, Metric) and m.update_count]
        self.running[trainer.global_step] = {name: float(m.compute()) for name, m in metrics}
        if trainer.global_step == self.pause_step:
            if trainer.is_global_zero:
                print(f"paused at step {self.pause_step}", flush=True)
            time.sleep(3600)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            torch.save(self.running, self.folder / "running.pt")


if __name__ == "__main__":
    folder, pause_step = Path(sys.argv[1]), int(sys.argv[2])
    trainers_with(DumpRank(folder), RunningMetrics(folder, pause_step))
    train.main(sys.argv[3:])  # train.py's door, its exit included
