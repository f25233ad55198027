"""Broken on purpose: the guide's regressor with a plain shuffled DataLoader. No checkpoint holds its place in an
epoch, so a run stopped mid-epoch and resumed reads other batches than an uninterrupted one."""

from __future__ import annotations

import dataclasses
from typing import Any

from my_task import TASK, RegressionData
from torch.utils.data import DataLoader

from lightning_gpu_engine import train


class PlainLoaderData(RegressionData):
    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.splits["train"], batch_size=self.hparams["batch_size"], shuffle=True, drop_last=True)


def build_data(cfg: Any, opts: Any, hw: Any) -> PlainLoaderData:
    return PlainLoaderData(
        opts.features, opts.samples, opts.noise, cfg.batch_size, cfg.seed, hw.num_workers, hw.pin_memory
    )


if __name__ == "__main__":
    train(dataclasses.replace(TASK, build_data=build_data))
