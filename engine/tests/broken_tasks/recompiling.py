"""Broken on purpose: the guide's regressor with a network that reads a Python number changing every step, which
torch.compile treats as a constant: each new value compiles the network again."""

from __future__ import annotations

import dataclasses
from typing import Any

from my_task import TASK, Regressor
from torch import Tensor, nn

from lightning_gpu_engine import run_hparams, train


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.by = 1

    def forward(self, x: Tensor) -> Tensor:
        return x * self.by


class RecompilingRegressor(Regressor):
    def __init__(self, features: int, hidden: int, **hparams: Any) -> None:
        super().__init__(features, hidden, **hparams)
        self.net.append(Scale())

    def configure_model(self) -> None:
        # dynamo without inductor's code generation: the recompilations are the same, in a fraction of the time
        self.net.compile(backend="eager", dynamic=False)
        super().configure_model()

    def shared_step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        self.net[-1].by = 1 + self.global_step % 2
        return super().shared_step(batch, stage)


def build_model(cfg: Any, opts: Any, hw: Any, data: Any) -> RecompilingRegressor:
    return RecompilingRegressor(opts.features, opts.hidden, **run_hparams(cfg, hw))


if __name__ == "__main__":
    train(dataclasses.replace(TASK, build_model=build_model))
