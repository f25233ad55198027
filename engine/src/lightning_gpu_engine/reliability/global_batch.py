"""The global batch, batch size x devices x accumulation, on --resume: the steps of the schedule and the place in the
epoch are counted in it, so it may be split anew but not changed, and a new split moves the place in the epoch."""

from __future__ import annotations

import math
from typing import Any

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.task import AFRESH


def check_global_batch(old: dict[str, Any], cfg: Config, world_size: int) -> list[str]:
    """batch size x devices x accumulation may be split anew, but its product must stay: the steps count in it."""
    # A checkpoint without a record (an older one) says only its batch size: the rest is taken as unchanged
    before = (
        old["batch_size"],
        old.get("world_size", world_size),
        old.get("accumulate_grad_batches", cfg.accumulate_grad_batches),
    )
    after = (cfg.batch_size, world_size, cfg.accumulate_grad_batches)
    if before == after:
        return []
    split = "{} per device x {} devices x {} accumulated".format
    if math.prod(before) == math.prod(after):
        return [
            f"{split(*after)} instead of the checkpoint's {split(*before)}: the same global batch of "
            f"{math.prod(after)}; the place in the epoch is converted into samples seen, so none is skipped or repeated"
        ]
    name = "batch_size" if before[0] != after[0] else "accumulate_grad_batches" if before[2] != after[2] else "devices"
    per_device, rest = divmod(math.prod(before), world_size * cfg.accumulate_grad_batches)
    keep = f"e.g. --batch-size {per_device}" if per_device and not rest else f"as it was ({split(*before)})"
    raise ConfigError(
        name,
        f"the checkpoint was trained with a global batch of {math.prod(before)} ({split(*before)}), not "
        f"{math.prod(after)} ({split(*after)}); the schedule and the place in the epoch are counted in its steps: keep "
        f"it, {keep}, {AFRESH}",
    )


def move_position(checkpoint: dict[str, Any], old: dict[str, Any], batch_size: int, world_size: int) -> None:
    """The loader's place, counted in old batches, as new ones: the epoch's order is one permutation for all
    batch sizes and device counts, so the samples seen are a prefix of it, a whole number of new batches."""
    position = (checkpoint.get("exact_resume") or {}).get("train_loader")
    before = old["batch_size"] * old.get("world_size", world_size)
    after = batch_size * world_size
    if position is None or before == after:
        return
    done = position["batches_done"]
    if done >= old.get("train_batches", math.inf):  # at the epoch's end: at the end of the new epoch too
        moved = math.ceil(old["train_items"] / world_size) // batch_size
    else:
        moved = done * before // after
    position["batches_done"] = moved
    # Lightning counts the epoch's batches too: it ends the epoch, and steps the optimizer, by that count
    current = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    for key, value in current.items():
        current[key] = max(0, value + moved - done)
