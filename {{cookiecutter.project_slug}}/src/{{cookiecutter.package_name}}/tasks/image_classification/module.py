"""The LightningModule: a torchvision or timm network, one shared step for train/val/test, AdamW with warm-up and
cosine, and the fine-tuning recipe of finetune.py when it starts from pretrained weights."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.utilities.types import LRSchedulerTypeUnion
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from ...engine.config import Config, ConfigError
from ...engine.hardware import Hardware
from . import finetune
from .networks import block_types, build_network, check_image_size, head_names, note, preprocessing
from .weights import LIBRARY, load_pretrained

__all__ = ["Batch", "ImageClassifier", "block_types", "build_network"]

Batch = tuple[Tensor, Tensor]
DEFAULT_CLASSES = tuple(f"class{i}" for i in range(10))


class ImageClassifier(L.LightningModule):
    mean: Tensor  # buffers, (1, 3, 1, 1), 0-255 scale
    std: Tensor

    def __init__(
        self,
        model: str = "resnet18",
        class_names: Sequence[str] = DEFAULT_CLASSES,
        image_size: int = 64,
        pretrained: str | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        crop_pct: float | None = None,
        interpolation: str | None = None,
        lr: float = 2e-3,
        weight_decay: float = 0.05,
        warmup_fraction: float = 0.05,
        backbone_lr_scale: float = 0.1,
        freeze_epochs: int = 1,
        channels_last: bool = True,
        fsdp: bool = False,
        compile: bool = False,
        compile_mode: str = "default",
    ) -> None:
        """`pretrained` only shapes the network (the ImageNet stem is kept) and turns the fine-tuning recipe on; the
        weights themselves are loaded by from_config, so loading a checkpoint never downloads anything.
        mean/std (0-255 scale), crop_pct and interpolation: unset = the pretrained weights' own (ImageNet's without)."""
        super().__init__()
        class_names = list(class_names)  # saved as a plain list, so checkpoints load with weights_only=True
        own = preprocessing(model if pretrained else None)
        mean, std = list(mean or own["mean"]), list(std or own["std"])
        crop_pct, interpolation = crop_pct or own["crop_pct"], interpolation or own["interpolation"]
        self.save_hyperparameters()
        num_classes = len(class_names)
        check_image_size(model, num_classes, image_size, bool(pretrained))
        self.net = build_network(model, num_classes, image_size, bool(pretrained))
        # Under FSDP (use_orig_params) a channels_last weight gets a contiguous gradient, and CUDA's fused AdamW refuses
        # tensors whose strides differ. So FSDP keeps weights in the default layout; inputs stay NHWC.
        if channels_last and not fsdp:
            self.net = self.net.to(memory_format=torch.channels_last)
        # Made from the hparams, so not saved with the weights: exports and predict.py get them with the model.
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1), persistent=False)
        self.head = head_names(self.net, model, num_classes, image_size, bool(pretrained))
        self.no_decay = finetune.no_decay_names(self.net)
        norms = (nn.modules.batchnorm._BatchNorm,)
        self.backbone_norms = [
            m for n, m in self.net.named_modules() if isinstance(m, norms) and f"{n}.weight" not in self.head
        ]
        # Training accuracy is the plain (micro) one: the per-class (macro) average counts with a bincount, which waits
        # for the GPU at every step. With classes of equal size the two are the same number.
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc, self.test_acc = (MulticlassAccuracy(num_classes) for _ in range(2))
        self.flops_per_batch = 0  # set in configure_model; ThroughputMonitor divides it by step time for MFU
        self.loss_scale: float | None = None  # 16-mixed: GradScaler's scale after the last optimizer step

    @classmethod
    def from_config(cls, cfg: Config, hw: Hardware, class_names: Sequence[str]) -> ImageClassifier:
        """A run's options as this module's arguments, with the layout and compile choices resolved for the machine,
        and the pretrained weights loaded into the backbone."""
        if cfg.backbone_lr_scale <= 0 or cfg.freeze_epochs < 0:
            bad = "backbone_lr_scale" if cfg.backbone_lr_scale <= 0 else "freeze_epochs"
            raise ConfigError(bad, f"must be {'positive' if bad == 'backbone_lr_scale' else '0 or more'}")
        if cfg.ema and not 0 < cfg.ema_decay < 1:
            raise ConfigError("ema_decay", f"must be between 0 and 1 (0.999 is usual), got {cfg.ema_decay}")
        if cfg.ema and cfg.strategy == "fsdp":
            raise ConfigError("ema", "keeps a whole copy of the model on every device, which FSDP exists to avoid")
        model = cls(
            model=cfg.model,
            class_names=class_names,
            image_size=cfg.image_size,
            pretrained=cfg.pretrained,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            warmup_fraction=cfg.warmup_fraction,
            backbone_lr_scale=cfg.backbone_lr_scale,
            freeze_epochs=cfg.freeze_epochs,
            channels_last=hw.channels_last,  # the DataModule's too: Lightning refuses hparams that disagree
            fsdp=cfg.strategy == "fsdp",
            compile=hw.compile,
            compile_mode=cfg.compile_mode,
        )
        if cfg.pretrained:
            load_pretrained(model.net, cfg.model, cfg.pretrained, model.head, cfg.image_size)
            with torch.no_grad():  # a zero head sends no random gradient into the pretrained features at the start
                for name, tensor in model.net.named_parameters():
                    if name in model.head:
                        tensor.zero_()
            trained_at = preprocessing(cfg.model)["input_size"]
            # 64 px: below it, an unpretrained network would have had its stem made gentler (networks.build_network)
            if cfg.image_size <= 64 or (cfg.pretrained == LIBRARY and cfg.image_size * 2 <= trained_at):
                note(
                    f"with pretrained weights {cfg.model} keeps its own stem (no small-image change); at "
                    f"{cfg.image_size} px its features are coarse: a larger --image-size suits it ({trained_at} px "
                    "for the library's weights)"
                )
        return model

    @property
    def num_classes(self) -> int:
        return len(self.hparams["class_names"])

    def train(self, mode: bool = True) -> ImageClassifier:
        # While the backbone is frozen its BatchNorm layers normalise with the pretrained statistics and leave them
        # unchanged; batch statistics of a new, often small-batch dataset would shift the features under the head.
        super().train(mode)
        if mode and self._trainer is not None and self.current_epoch < self._freeze_epochs():
            for norm in self.backbone_norms:
                norm.eval()
        return self

    def _freeze_epochs(self) -> int:
        return self.hparams["freeze_epochs"] if self.hparams["pretrained"] else 0

    def on_train_epoch_start(self) -> None:
        self.train()  # re-decide the BatchNorm mode as the epoch changes (validation restores the modes it found)

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
        # --fast-dev-run checks the wiring with one step: no throughput window, so no MFU to count FLOPs for.
        if stage == "fit" and datamodule is not None and not getattr(self.trainer, "fast_dev_run", False):
            self.flops_per_batch = self._measure_flops(datamodule.hparams["batch_size"])

    def _measure_flops(self, batch_size: int) -> int:
        hp = self.hparams
        try:
            with torch.device("meta"):  # counts FLOPs without allocating or computing anything
                net = build_network(hp["model"], self.num_classes, hp["image_size"], bool(hp["pretrained"]))
                x = torch.empty(batch_size, 3, hp["image_size"], hp["image_size"])
            return measure_flops(net, lambda: net(x), lambda out: out.sum())
        except Exception as err:  # an op without a meta kernel, a constructor needing real numbers
            note(f"FLOPs of {hp['model']} cannot be counted on the meta device ({type(err).__name__}); no MFU logged")
            return 0

    def forward(self, x: Tensor) -> Tensor:
        """Float images in [0, 255], NCHW at the model's resolution; normalised here, so exports need only the model."""
        return self.net((x - self.mean) / self.std)

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
        # Parameters are told apart by the names recorded at construction: under FSDP every one is already a flat
        # 1-D shard here and module types are hidden, so neither shape nor module type would do.
        hp = self.hparams
        groups = finetune.param_groups(
            self.named_parameters(), self.no_decay, self.head, hp["weight_decay"], backbone=bool(hp["pretrained"])
        )
        # Fused AdamW: one kernel for the whole update instead of several per tensor. Lightning cannot clip gradients
        # of a fused optimizer under a GradScaler (16-mixed), so that one combination stays unfused.
        scaled_clip = self.trainer.precision == "16-mixed" and bool(self.trainer.gradient_clip_val)
        optimizer = torch.optim.AdamW(groups, lr=hp["lr"], fused=self.device.type == "cuda" and not scaled_clip)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        batches = self.trainer.num_training_batches  # known once estimated_stepping_batches has loaded the data
        per_epoch = math.ceil(batches / self.trainer.accumulate_grad_batches) if math.isfinite(batches) else total
        freeze_steps = min(total, self._freeze_epochs() * per_epoch)
        lambdas = finetune.schedules(total, int(hp["warmup_fraction"] * total), freeze_steps, hp["backbone_lr_scale"])
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambdas[bool(g["backbone"])] for g in groups])
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
