"""An LSTM forecaster on sine windows, written from the guide alone: an EngineModule with its own
configure_optimizers (Adam and a per-epoch StepLR, in Lightning's tuple-of-lists form), which declares compile off
since dynamo captures no LSTM. It predicts a wave's next value from the last `window`: `python sequence.py`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_gpu_engine import (
    ConfigError,
    EngineModule,
    Task,
    eval_loader,
    opt,
    run_hparams,
    train,
    train_loader,
)

OWN_ADAM = "the forecaster's Adam and StepLR are its own (configure_optimizers)"


@dataclass
class SequenceOptions:
    window: int = opt(16, "past values the forecaster reads to predict the next")
    hidden: int = opt(16, "the LSTM's hidden size")
    samples: int = opt(1024, "training windows, each from a wave of its own; validation and test get a quarter each")

    def __post_init__(self) -> None:
        for name in ("window", "hidden", "samples"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be a positive integer, got {getattr(self, name)}")


class SineWindows(L.LightningDataModule):
    def __init__(
        self, window: int, samples: int, batch_size: int, seed: int, num_workers: int, pin_memory: bool
    ) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        hp = self.hparams
        generator = torch.Generator().manual_seed(hp["seed"])

        def windows(n: int) -> TensorDataset:
            phase = 2 * math.pi * torch.rand(n, 1, generator=generator)
            speed = 0.1 + 0.4 * torch.rand(n, 1, generator=generator)
            wave = torch.sin(phase + speed * torch.arange(hp["window"] + 1))
            return TensorDataset(wave[:, :-1, None], wave[:, -1])

        self.splits = {
            "train": windows(hp["samples"]),
            "val": windows(hp["samples"] // 4),
            "test": windows(hp["samples"] // 4),
        }

    def train_dataloader(self) -> DataLoader[Any]:
        hp = self.hparams
        return train_loader(self.splits["train"], hp["batch_size"], hp["seed"], hp["num_workers"], hp["pin_memory"])

    def val_dataloader(self) -> DataLoader[Any]:
        hp = self.hparams
        return eval_loader(self.splits["val"], hp["batch_size"], hp["num_workers"], hp["pin_memory"])

    def test_dataloader(self) -> DataLoader[Any]:
        hp = self.hparams
        return eval_loader(self.splits["test"], hp["batch_size"], hp["num_workers"], hp["pin_memory"])


class LSTMNet(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1]).squeeze(-1)


class Forecaster(EngineModule):
    def __init__(self, window: int, hidden: int, lr: float, **engine: Any) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = LSTMNet(hidden)

    def example_input(self, batch_size: int) -> Tensor:
        return torch.empty(batch_size, self.hparams["window"], 1)

    def shared_step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=stage != "train", sync_dist=stage != "train")
        return loss

    def configure_optimizers(self) -> Any:
        adam = torch.optim.Adam(self.parameters(), lr=self.hparams["lr"])
        return [adam], [torch.optim.lr_scheduler.StepLR(adam, step_size=1, gamma=0.8)]


TASK = Task(
    name="an LSTM forecaster of sine waves",
    options=SequenceOptions,
    build_data=lambda cfg, opts, hw: SineWindows(
        opts.window, opts.samples, cfg.batch_size, cfg.seed, hw.num_workers, hw.pin_memory
    ),
    build_model=lambda cfg, opts, hw, data: Forecaster(opts.window, opts.hidden, **run_hparams(cfg, hw)),
    length_fn=lambda batch: batch[0].shape[0] * batch[0].shape[1],  # values read per batch: items/s
    unit="windows",
    compile_off="dynamo captures no graph of an LSTM (it leaves RNN modules to eager PyTorch)",
    not_applicable=dict.fromkeys(("weight_decay", "betas", "optimizer", "muon_lr", "warmup_fraction"), OWN_ADAM),
    defaults={"batch_size": 64, "lr": 1e-2},
)

if __name__ == "__main__":
    train(TASK)
