"""The LightningModule: a torchvision network, one shared step for train/val/test, AdamW with warm-up and cosine."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
import torchvision
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.utilities.types import LRSchedulerTypeUnion
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from .config import Config, ConfigError
from .hardware import Hardware

Batch = tuple[Tensor, Tensor]


def build_network(name: str, num_classes: int, image_size: int) -> nn.Module:
    classifiers = torchvision.models.list_models(torchvision.models)  # detection, video, flow models live elsewhere
    if name not in classifiers:
        valid = ", ".join(classifiers)
        raise ConfigError("model", f"unknown model {name!r}: not a torchvision classification model; one of: {valid}")
    net = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    if image_size <= 64 and isinstance(getattr(net, "conv1", None), nn.Conv2d) and hasattr(net, "maxpool"):
        # A 7x7/2 conv plus max-pool shrinks a tiny image 4x before the first block; a 3x3/2 stem without the pool
        # halves it once, keeping 4x the resolution (stride 1 would gain ~2% on CIFAR-10 for 4x the compute).
        net.conv1 = nn.Conv2d(3, net.conv1.out_channels, kernel_size=3, stride=2, padding=1, bias=False)
        net.maxpool = nn.Identity()
    return net


def check_image_size(name: str, num_classes: int, image_size: int) -> None:
    """Run the network on the meta device (shapes only: no memory, no compute) so a too-small image fails at start."""

    def fits(size: int) -> bool:
        with torch.device("meta"):
            try:
                build_network(name, num_classes, size)(torch.empty(2, 3, size, size))
            except NotImplementedError:
                return True  # an op without a meta kernel: leave the verdict to the real run
            except ConfigError:
                raise  # a ValueError too, but about --model, not the size
            except (RuntimeError, ValueError, AssertionError):  # what conv, pool and ViT's size check raise
                return False
        return True

    if not fits(image_size):
        larger = next((s for s in (32, 64, 96, 128, 224, 299, 384, 518) if s > image_size and fits(s)), None)
        hint = f"try --image-size {larger}" if larger else "try a larger --image-size"
        raise ConfigError("image_size", f"{image_size} px is too small for {name}; {hint}")


def block_types(net: nn.Module) -> set[type[nn.Module]]:
    """The classes of the network's repeated blocks (ResNet's BasicBlock or Bottleneck, ViT's EncoderBlock, ...).

    FSDP shards, and activation checkpointing recomputes, one such block at a time. A block is the outermost module
    with sub-modules of its own inside a Sequential/ModuleList/ModuleDict stage; none found means one unit for all.
    """
    stages = (nn.Sequential, nn.ModuleList, nn.ModuleDict)

    def blocks(module: nn.Module) -> Iterator[type[nn.Module]]:
        for child in module.children():
            if isinstance(module, stages) and not isinstance(child, stages) and next(child.children(), None):
                yield type(child)  # its insides are sharded with it, so no need to look further down
            else:
                yield from blocks(child)

    return set(blocks(net))


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
        check_image_size(model, num_classes, image_size)
        self.net = build_network(model, num_classes, image_size)
        if channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        # Training accuracy is the plain (micro) one: the per-class (macro) average counts with a bincount, which waits
        # for the GPU at every step. With classes of equal size the two are the same number.
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc, self.test_acc = (MulticlassAccuracy(num_classes) for _ in range(2))
        self.flops_per_batch = 0  # set in configure_model; ThroughputMonitor divides it by step time for MFU
        self.loss_scale: float | None = None  # 16-mixed: GradScaler's scale after the last optimizer step

    @classmethod
    def from_config(cls, cfg: Config, hw: Hardware, num_classes: int) -> ImageClassifier:
        """A run's options as this module's arguments, with the layout and compile choices resolved for the machine."""
        return cls(
            model=cfg.model,
            num_classes=num_classes,
            image_size=cfg.image_size,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            warmup_fraction=cfg.warmup_fraction,
            channels_last=hw.channels_last,
            compile=hw.compile,
            compile_mode=cfg.compile_mode,
        )

    def configure_model(self) -> None:
        # Compile the network, not the LightningModule, so self.log, hooks and the DDP wrapper stay in eager Python.
        # nn.Module.compile() works in place and keeps state_dict keys free of the `_orig_mod.` prefix.
        if self.hparams["compile"] and not getattr(self.net, "_compiled_call_impl", None):
            # dynamic=False: training batches share one size (drop_last) but evaluation's last batch is smaller, and by
            # default dynamo answers a new size by making the batch dimension symbolic, also in the training graph
            # compiled after it, which then loses its static-shape kernels. Instead each size gets its own graph.
            self.net.compile(mode=self.hparams["compile_mode"], dynamic=False)

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
        # prog_bar=True would read the loss back from the GPU every step; monitors.LogStepProgressBar shows it instead.
        self.log(f"{stage}/loss", loss, on_step=train, on_epoch=not train, prog_bar=not train, sync_dist=not train)
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=stage != "train")
        return loss

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "test")

    def configure_optimizers(self) -> Any:
        # Conv and linear weights decay; norms and biases do not (decaying them only hurts). Told apart by module,
        # not by shape: under FSDP every parameter is already a flat 1-D shard when this runs.
        norms = (nn.BatchNorm2d, nn.SyncBatchNorm, nn.GroupNorm, nn.LayerNorm)
        decay: list[nn.Parameter] = []
        no_decay: list[nn.Parameter] = []
        for module in self.modules():
            for name, p in module.named_parameters(recurse=False):
                (no_decay if isinstance(module, norms) or name == "bias" else decay).append(p)
        # Fused AdamW: one kernel for the whole update instead of several per tensor. Lightning cannot clip gradients
        # of a fused optimizer under a GradScaler (16-mixed), so that one combination stays unfused.
        scaled_clip = self.trainer.precision == "16-mixed" and bool(self.trainer.gradient_clip_val)
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": self.hparams["weight_decay"]},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=self.hparams["lr"],
            fused=self.device.type == "cuda" and not scaled_clip,
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = int(self.hparams["warmup_fraction"] * total)

        def schedule(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_train_start(self) -> None:
        self.loss_scale = self._current_loss_scale()  # after a resume has restored the scaler's state

    def lr_scheduler_step(self, scheduler: LRSchedulerTypeUnion, metric: Any) -> None:
        # 16-mixed: on overflowing gradients GradScaler skips optimizer.step and halves its scale, but Lightning still
        # steps the schedule, which would then run ahead of the weights; a drop in scale is how a skip shows.
        # Reading the scale waits for the GPU once per step, and only under 16-mixed.
        before, self.loss_scale = self.loss_scale, self._current_loss_scale()
        if before is None or self.loss_scale is None or self.loss_scale >= before:
            super().lr_scheduler_step(scheduler, metric)

    def _current_loss_scale(self) -> float | None:
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        return scaler.get_scale() if scaler is not None and scaler.is_enabled() else None
