"""Broken on purpose: the guide's regressor showing its per-step loss with prog_bar=True, which reads it back from
the device after every step."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch.nn.functional as F
from my_task import TASK, Regressor
from torch import Tensor

from lightning_gpu_engine import run_hparams, train


class ProgressBarRegressor(Regressor):
    def shared_step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x).squeeze(-1), y)
        train = stage == "train"
        self.log(f"{stage}/loss", loss, on_step=train, on_epoch=not train, sync_dist=not train, prog_bar=True)
        return loss


def build_model(cfg: Any, opts: Any, hw: Any, data: Any) -> ProgressBarRegressor:
    return ProgressBarRegressor(opts.features, opts.hidden, **run_hparams(cfg, hw))


if __name__ == "__main__":
    train(dataclasses.replace(TASK, build_model=build_model))
