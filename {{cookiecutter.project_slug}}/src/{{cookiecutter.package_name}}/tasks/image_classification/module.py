"""The LightningModule: a torchvision or timm network, one shared step for train/val/test, and the fine-tuning recipe
of finetune.py when it starts from pretrained weights; compile, AdamW and the schedule come from EngineModule."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from lightning_gpu_engine import Config, EngineModule, Hardware, no_decay_names, note, run_hparams
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from . import finetune
from .config import ImageOptions
from .inputs import LIBRARY
from .networks import build_network, check_image_size, head_names, preprocessing
from .weights import load_pretrained

Batch = tuple[Tensor, Tensor]
DEFAULT_CLASSES = tuple(f"class{i}" for i in range(10))


class ImageClassifier(EngineModule):
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
        betas: Sequence[float] = (0.9, 0.999),
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
        class_names, betas = list(class_names), list(betas)  # plain lists: checkpoints load with weights_only=True
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
        self.no_decay = no_decay_names(self.net)
        norms = (nn.modules.batchnorm._BatchNorm,)
        self.backbone_norms = [
            m for n, m in self.net.named_modules() if isinstance(m, norms) and f"{n}.weight" not in self.head
        ]
        # acc is the plain (micro) top-1 accuracy in every stage: what a reader takes "accuracy" for, and what the best
        # checkpoint and a sweep choose by (val/acc). Evaluation adds balanced_acc, the mean of the per-class
        # accuracies (torchmetrics' macro), which an imbalanced split tells apart; training does without it, since its
        # bincount waits for the GPU at every step. With classes of equal size the two are the same number.
        self.train_acc, self.val_acc, self.test_acc = (MulticlassAccuracy(num_classes, average="micro") for _ in "tvt")
        self.val_balanced_acc, self.test_balanced_acc = (MulticlassAccuracy(num_classes, average="macro") for _ in "vt")

    @classmethod
    def from_config(cls, cfg: Config, opts: ImageOptions, hw: Hardware, class_names: Sequence[str]) -> ImageClassifier:
        """A run's options as this module's arguments, with the layout and compile choices resolved for the machine,
        and the pretrained weights loaded into the backbone."""
        model = cls(
            model=opts.model,
            class_names=class_names,
            image_size=opts.image_size,
            pretrained=opts.pretrained,
            backbone_lr_scale=opts.backbone_lr_scale,
            freeze_epochs=opts.freeze_epochs,
            channels_last=bool(hw.channels_last),  # the DataModule's too: Lightning refuses hparams that disagree
            fsdp=cfg.strategy == "fsdp",
            **run_hparams(cfg, hw),
        )
        if opts.pretrained:
            load_pretrained(model.net, opts.model, opts.pretrained, model.head, opts.image_size)
            with torch.no_grad():  # a zero head sends no random gradient into the pretrained features at the start
                for name, tensor in model.net.named_parameters():
                    if name in model.head:
                        tensor.zero_()
            trained_at = preprocessing(opts.model)["input_size"]
            # 64 px: below it, an unpretrained network would have had its stem made gentler (networks.build_network)
            if opts.image_size <= 64 or (opts.pretrained == LIBRARY and opts.image_size * 2 <= trained_at):
                note(
                    f"with pretrained weights {opts.model} keeps its own stem (no small-image change); at "
                    f"{opts.image_size} px its features are coarse: a larger --image-size suits it ({trained_at} px "
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

    def forward(self, x: Tensor) -> Tensor:
        """Float images in [0, 255], NCHW at the model's resolution; normalised here, so exports need only the model.
        In the weights' dtype: under --precision bf16-true the batch is made float32 after Lightning converted it."""
        return self.net((x.to(self.mean.dtype) - self.mean) / self.std)

    def shared_step(self, batch: Batch, stage: str) -> Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        accuracy = getattr(self, f"{stage}_acc")
        accuracy(logits, y)
        train = stage == "train"
        # prog_bar=True would read the loss back from the GPU every step; monitors.LogStepProgressBar shows it instead.
        self.log(f"{stage}/loss", loss, on_step=train, on_epoch=not train, prog_bar=not train, sync_dist=not train)
        self.log(f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=stage != "train")
        if not train:
            balanced = getattr(self, f"{stage}_balanced_acc")
            balanced(logits, y)
            self.log(f"{stage}/balanced_acc", balanced, on_step=False, on_epoch=True)
        return loss

    def param_groups(self) -> list[dict[str, Any]]:
        """Up to four groups: (head, backbone) x (decay, no decay); the backbone's only with --pretrained."""
        hp = self.hparams
        assert self.no_decay is not None
        return finetune.param_groups(
            self.named_parameters(), self.no_decay, self.head, hp["weight_decay"], backbone=bool(hp["pretrained"])
        )

    def lr_multipliers(self, total: int, groups: list[dict[str, Any]]) -> list[Callable[[int], float]]:
        batches = self.trainer.num_training_batches  # known once estimated_stepping_batches has loaded the data
        per_epoch = math.ceil(batches / self.trainer.accumulate_grad_batches) if math.isfinite(batches) else total
        freeze_steps = min(total, self._freeze_epochs() * per_epoch)
        hp = self.hparams
        lambdas = finetune.schedules(total, int(hp["warmup_fraction"] * total), freeze_steps, hp["backbone_lr_scale"])
        return [lambdas[bool(g["backbone"])] for g in groups]

    def example_input(self, batch_size: int) -> Tensor:
        size = self.hparams["image_size"]
        return torch.empty(batch_size, 3, size, size, device="meta")

    def meta_network(self) -> nn.Module:
        hp = self.hparams
        with torch.device("meta"):  # built there directly: no copy of the weights
            return build_network(hp["model"], self.num_classes, hp["image_size"], bool(hp["pretrained"]))
