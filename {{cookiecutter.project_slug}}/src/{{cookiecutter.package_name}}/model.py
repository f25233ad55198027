"""The LightningModule: a torchvision network, one shared step for train/val/test, AdamW with warm-up and cosine."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
import torchvision
from lightning.fabric.utilities.throughput import measure_flops
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from .config import ConfigError

Batch = tuple[Tensor, Tensor]


def build_network(name: str, num_classes: int, image_size: int) -> nn.Module:
    try:
        net = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    except ValueError:
        valid = ", ".join(torchvision.models.list_models(torchvision.models))
        raise ConfigError("model", f"unknown model {name!r}; torchvision has: {valid}") from None
    if image_size <= 64 and isinstance(getattr(net, "conv1", None), nn.Conv2d) and hasattr(net, "maxpool"):
        # A 7x7/2 conv plus max-pool shrinks a tiny image 4x before the first block; a 3x3/2 stem without the pool
        # halves it once, keeping 4x the resolution (stride 1 would gain ~2% on CIFAR-10 for 4x the compute).
        net.conv1 = nn.Conv2d(3, net.conv1.out_channels, kernel_size=3, stride=2, padding=1, bias=False)
        net.maxpool = nn.Identity()
    return net


class ImageClassifier(L.LightningModule):
    def __init__(
        self,
        model: str = "resnet18",
        num_classes: int = 10,
        image_size: int = 64,
        lr: float = 2e-3,
        weight_decay: float = 0.05,
        warmup_fraction: float = 0.05,
        channels_last: bool = True,
        compile: bool = False,
        compile_mode: str = "default",
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = build_network(model, num_classes, image_size)
        if channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        self.train_acc, self.val_acc, self.test_acc = (MulticlassAccuracy(num_classes) for _ in range(3))
        self.flops_per_batch = 0  # set in configure_model; ThroughputMonitor divides it by step time for MFU

    def configure_model(self) -> None:
        # Compile the network, not the LightningModule, so self.log, hooks and the DDP wrapper stay in eager Python.
        # nn.Module.compile() works in place and keeps state_dict keys free of the `_orig_mod.` prefix.
        if self.hparams["compile"] and not getattr(self.net, "_compiled_call_impl", None):
            self.net.compile(mode=self.hparams["compile_mode"])

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and datamodule is not None:
            self.flops_per_batch = self._measure_flops(datamodule.hparams["batch_size"])

    def _measure_flops(self, batch_size: int) -> int:
        hp = self.hparams
        with torch.device("meta"):  # counts FLOPs without allocating or computing anything
            net = build_network(hp["model"], hp["num_classes"], hp["image_size"])
            x = torch.empty(batch_size, 3, hp["image_size"], hp["image_size"])
        return measure_flops(net, lambda: net(x), lambda out: out.sum())

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def _shared_step(self, batch: Batch, stage: str) -> Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        accuracy = getattr(self, f"{stage}_acc")
        accuracy(logits, y)
        train = stage == "train"
        self.log(f"{stage}/loss", loss, on_step=train, on_epoch=not train, prog_bar=True, sync_dist=not train)
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=stage != "train")
        return loss

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "test")

    def configure_optimizers(self) -> Any:
        decay = [p for p in self.parameters() if p.ndim > 1]  # conv and linear weights
        no_decay = [p for p in self.parameters() if p.ndim <= 1]  # norms and biases: decaying them only hurts
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": self.hparams["weight_decay"]},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=self.hparams["lr"],
            fused=self.device.type == "cuda",  # one kernel for the whole update instead of several per tensor
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = int(self.hparams["warmup_fraction"] * total)

        def schedule(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
