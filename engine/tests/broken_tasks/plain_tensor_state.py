"""Broken on purpose: the guide's regressor keeping a running mean of its targets, updated in its own
on_train_batch_end, in a plain tensor attribute: no checkpoint holds it, so a resumed run starts it afresh."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from my_task import TASK, Regressor

from lightning_gpu_engine import run_hparams, train


class MeanKeepingRegressor(Regressor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target_mean = torch.zeros(())  # should be a buffer: register_buffer("target_mean", ...)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.target_mean = 0.9 * self.target_mean.to(self.device) + 0.1 * batch[1].mean().detach()


def build_model(cfg: Any, opts: Any, hw: Any, data: Any) -> MeanKeepingRegressor:
    return MeanKeepingRegressor(opts.features, opts.hidden, **run_hparams(cfg, hw))


if __name__ == "__main__":
    train(dataclasses.replace(TASK, build_model=build_model))
