"""Broken on purpose: the guide's regressor logging how many batches it has trained on, counted in a Python number
that no checkpoint holds: a resumed run counts from 0 again."""

from __future__ import annotations

import dataclasses
from typing import Any

from my_task import TASK, Regressor
from torch import Tensor

from lightning_gpu_engine import run_hparams, train


class CountingRegressor(Regressor):
    batches_trained = 0  # should be saved by on_save_checkpoint and read back by on_load_checkpoint

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        self.batches_trained += 1
        self.log("train/batches_trained", float(self.batches_trained))
        return super().training_step(batch, batch_idx)


def build_model(cfg: Any, opts: Any, hw: Any, data: Any) -> CountingRegressor:
    return CountingRegressor(opts.features, opts.hidden, **run_hparams(cfg, hw))


if __name__ == "__main__":
    train(dataclasses.replace(TASK, build_model=build_model))
