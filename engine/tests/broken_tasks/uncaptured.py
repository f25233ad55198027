"""Broken on purpose: the guide's regressor reading its features as a sequence with an LSTM, which dynamo leaves to
eager PyTorch: --compile then compiles nothing, and the task does not declare compile off."""

from __future__ import annotations

import dataclasses
from typing import Any

from my_task import TASK, Regressor
from torch import Tensor, nn

from lightning_gpu_engine import run_hparams, train


class SequenceNet(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.lstm(x.unsqueeze(-1))
        return self.head(out[:, -1])


class SequenceRegressor(Regressor):
    def __init__(self, features: int, hidden: int, **hparams: Any) -> None:
        super().__init__(features, hidden, **hparams)
        self.net = SequenceNet(hidden)

    def configure_model(self) -> None:
        # dynamo without inductor's code generation: what it captures is the same, in a fraction of the time
        self.net.compile(backend="eager", dynamic=False)
        super().configure_model()


def build_model(cfg: Any, opts: Any, hw: Any, data: Any) -> SequenceRegressor:
    return SequenceRegressor(opts.features, opts.hidden, **run_hparams(cfg, hw))


if __name__ == "__main__":
    train(dataclasses.replace(TASK, build_model=build_model))
