"""Broken on purpose: the guide's regressor declaring channels_last, with a network that folds each sample's 8
features into a 2x2x2 image itself. The engine converts the network's weights and its 4-D inputs, but this input is
2-D; the convolution inside then gets NCHW."""

from __future__ import annotations

import dataclasses
from typing import Any

from my_task import TASK, Regressor
from torch import nn

from lightning_gpu_engine import run_hparams, train


class ImageRegressor(Regressor):
    def __init__(self, features: int, hidden: int, **hparams: Any) -> None:
        super().__init__(features, hidden, **hparams)
        channels = features // 4
        self.net = nn.Sequential(
            nn.Unflatten(1, (channels, 2, 2)),
            nn.Conv2d(channels, hidden, 2),
            nn.GELU(),
            nn.Flatten(),
            nn.Linear(hidden, 1),
        )


def build_model(cfg: Any, opts: Any, hw: Any, data: Any) -> ImageRegressor:
    return ImageRegressor(opts.features, opts.hidden, **run_hparams(cfg, hw))


if __name__ == "__main__":
    train(dataclasses.replace(TASK, build_model=build_model, channels_last=True))
