"""AdamW parameter groups and the learning-rate schedule, with the fine-tuning recipe used when --pretrained.

Recipe (fast.ai's `fine_tune`, after ULMFiT's discriminative learning rates and gradual unfreezing):
- the new head trains alone while the backbone stays frozen for --freeze-epochs (default 1), so its random gradients
  never reach the pretrained features;
- then everything trains, the backbone at --backbone-lr-scale (default 0.1) of the head's peak learning rate,
  warmed up again from zero after unfreezing, and both decay on one cosine.
Frozen means a learning rate of exactly 0 (AdamW then leaves a weight bit-for-bit unchanged, decay included) with the
backbone's BatchNorm in eval mode: gradients still flow, but DDP, FSDP and a compiled graph see one network throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from lightning_gpu_engine import clean_name, warmup_cosine
from torch import nn


def param_groups(
    named: Iterable[tuple[str, nn.Parameter]],
    no_decay: set[str],
    head: set[str],
    weight_decay: float,
    backbone: bool,
) -> list[dict[str, object]]:
    """Up to four groups: (head, backbone) x (decay, no decay); `backbone=False` puts all in the head groups."""
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    for name, p in named:
        name = clean_name(name)
        key = (backbone and name not in head, name not in no_decay)
        groups.setdefault(key, []).append(p)
    return [
        {"params": params, "weight_decay": weight_decay if decay else 0.0, "backbone": is_backbone}
        for (is_backbone, decay), params in sorted(groups.items(), key=lambda kv: (kv[0][0], not kv[0][1]))
    ]


def schedules(total: int, warmup: int, freeze_steps: int, backbone_scale: float) -> dict[bool, Callable[[int], float]]:
    """Learning-rate multipliers per step: linear warm-up then cosine for the head; for the backbone the same, times
    `backbone_scale`, zero for the first `freeze_steps` and warmed up again from there."""

    head = warmup_cosine(total, warmup)

    def backbone(step: int) -> float:
        if step < freeze_steps:
            return 0.0
        ramp = min(1.0, (step - freeze_steps + 1) / warmup) if warmup else 1.0
        return backbone_scale * ramp * (head(step) if step >= warmup else 1.0)

    return {False: head, True: backbone}
