"""Resuming with options that differ from the checkpoint's: each change is refused, honoured or free, never silent.

Every checkpoint records the options of the run that wrote it (`RunRecord`). On `--resume`, `check_changes` compares
them with this run's before anything starts: a change that would make the checkpoint mean something else is refused in
one line; one that can be honoured is said in one line and applied to the checkpoint as Lightning loads it, since the
optimizer and scheduler states it restores would otherwise bring back the old values. The README's resume section
lists the same decisions; tests/test_resume_changes.py checks that every option of Config is in one group.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from ..tasks.image_classification.finetune import param_groups
from .config import Config, ConfigError

RECORD = "run_record"  # the checkpoint key of the options that trained it
AFRESH = "or start afresh in another --output-dir"

# What a change would silently alter, were it accepted
REFUSED = {
    "model": "its weights are for that network",
    "image_size": "its weights and BatchNorm statistics were learned at that size",
    "pretrained": "it set the network's stem and the fine-tuning recipe",
    "data": "its classes and images come from that source",
    "train_samples": "the synthetic images and the epoch's length follow it",  # synthetic data only
    "seed": "the shuffle order, the synthetic images and CIFAR-10's val split follow it",
    "ema": "with --ema its weights are the average, without it there is no average to continue",
    "strategy": "FSDP saves the optimizer state in another layout",  # only to or from fsdp
}
SCHEDULE = "the schedule is recomputed with it, and the rate moves to the new curve from the current step"
HONOURED = {
    "lr": "the schedule continues at the new peak (the optimizer's and scheduler's saved rates are rescaled)",
    "weight_decay": "applies from the next step (it replaces the value saved in the optimizer state)",
    "max_epochs": SCHEDULE,
    "max_steps": SCHEDULE,
    "warmup_fraction": SCHEDULE,
    "backbone_lr_scale": SCHEDULE,
    "freeze_epochs": SCHEDULE,
    "ema_decay": "the average continues with it from the current step",
}
# Honoured while their product, the global batch, stays the same: the schedule and the epoch are counted in its steps
GLOBAL_BATCH = ("batch_size", "accumulate_grad_batches", "devices", "num_nodes")
# Checked on their own: the same classes and images (data_dir); not searched again (auto_batch_size)
OWN_CHECK = ("data_dir", "auto_batch_size")
# How the run computes, reports and saves, never what it learns: applied as given, without a word
FREE = (
    "accelerator",
    "precision",
    "compile",
    "compile_mode",
    "channels_last",
    "tf32",
    "sync_batchnorm",
    "fsdp_sharding",
    "activation_checkpointing",
    "num_workers",
    "decode",
    "gradient_clip_val",
    "deterministic",
    "output_dir",
    "resume",
    "logger",
    "log_every_n_steps",
    "checkpoint_every",
    "fast_dev_run",
    "profile",
)


def recorded_options(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The options that trained `checkpoint`; without a record (an older checkpoint), those its hparams hold."""
    hparams = {**(checkpoint.get("datamodule_hyper_parameters") or {}), **(checkpoint.get("hyper_parameters") or {})}
    return {**{k: v for k, v in hparams.items() if k in Config.__dataclass_fields__}, **(checkpoint.get(RECORD) or {})}


def as_flag(name: str, value: Any) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else flag.replace("--", "--no-", 1)
    return f"{flag} {'none' if value is None else value}"


def keep_batch_size(cfg: Config, checkpoint: dict[str, Any]) -> list[str]:
    """--auto-batch-size on resume: the search would change the global batch mid-run, so it keeps the checkpoint's."""
    saved = recorded_options(checkpoint).get("batch_size")
    if not cfg.auto_batch_size or saved is None:
        return []
    cfg.batch_size, cfg.auto_batch_size = saved, False  # recorded as used: no search, the checkpoint's size
    return [f"--auto-batch-size is not searched again: the run continues with the checkpoint's --batch-size {saved}"]


def check_changes(
    checkpoint: dict[str, Any], cfg: Config, world_size: int, classes: list[str], images: int | None
) -> list[str]:
    """Refuse (ConfigError) a change that alters what the checkpoint means; else one line per honoured change.

    `images`: the training images of folder data (None for the others, whose count follows --data or --train-samples).
    """
    old, new = recorded_options(checkpoint), dataclasses.asdict(cfg)
    for name, why in REFUSED.items():
        before, after = old.get(name, new[name]), new[name]
        if name == "strategy" and (before == "fsdp") == (after == "fsdp"):
            continue
        if before != after and (name != "train_samples" or cfg.data == "synthetic"):
            raise ConfigError(
                name,
                f"the checkpoint was trained with {before}, not {after}; {why}: resume with "
                f"{as_flag(name, before)}, {AFRESH}",
            )
    saved_classes = list((checkpoint.get("hyper_parameters") or {}).get("class_names", classes))
    if saved_classes != list(classes):
        raise ConfigError(
            "data_dir",
            f"the checkpoint was trained with the classes {', '.join(saved_classes)}, not "
            f"{', '.join(classes)}; its outputs are those classes in that order: resume with the data it was trained "
            f"on, {AFRESH}",
        )
    if images is not None and old.get("train_images", images) != images:
        raise ConfigError(
            "data_dir",
            f"the checkpoint was trained with {old['train_images']} training images, not {images}; the "
            f"epoch's order and length follow them: resume with the same images, {AFRESH}",
        )
    notes = [
        f"{as_flag(name, new[name])} instead of the checkpoint's {old[name]}: {why}"
        for name, why in HONOURED.items()
        if old.get(name, new[name]) != new[name]
    ]
    return notes + check_global_batch(old, cfg, world_size)


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
            f"{math.prod(after)}; the place in the epoch is converted into images seen, so none is skipped or repeated"
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


class RunRecord(Callback):
    """Records this run's options in every checkpoint; on resume, applies the honoured changes to the checkpoint.

    Lightning calls `on_load_checkpoint` before it restores the loops, the optimizer and the scheduler from the same
    dictionary, so what is changed here is what they restore.
    """

    def __init__(self, cfg: Config, world_size: int) -> None:
        self.cfg, self.world_size = cfg, world_size

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        loader = trainer.train_dataloader
        checkpoint[RECORD] = {
            **dataclasses.asdict(self.cfg),
            "world_size": self.world_size,
            "train_images": len(loader.dataset) if loader is not None else None,  # type: ignore[arg-type]
            "train_batches": trainer.num_training_batches,  # per device: a position there is the epoch's end
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._move_position(checkpoint, recorded_options(checkpoint))
        self._rescale_optimizer(checkpoint, pl_module)

    def _move_position(self, checkpoint: dict[str, Any], old: dict[str, Any]) -> None:
        """The loader's place, counted in old batches, as new ones: the epoch's order is one permutation for all
        batch sizes and device counts, so the images seen are a prefix of it, a whole number of new batches."""
        position = (checkpoint.get("exact_resume") or {}).get("train_loader")
        before = old["batch_size"] * old.get("world_size", self.world_size)
        after = self.cfg.batch_size * self.world_size
        if position is None or before == after:
            return
        done = position["batches_done"]
        if done >= old.get("train_batches", math.inf):  # at the epoch's end: at the end of the new epoch too
            moved = math.ceil(old["train_images"] / self.world_size) // self.cfg.batch_size
        else:
            moved = done * before // after
        position["batches_done"] = moved
        # Lightning counts the epoch's batches too: it ends the epoch, and steps the optimizer, by that count
        current = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
        for key, value in current.items():
            current[key] = max(0, value + moved - done)

    def _rescale_optimizer(self, checkpoint: dict[str, Any], pl_module: L.LightningModule) -> None:
        """The saved optimizer and scheduler states hold the old peak rate and weight decay; this run's replace them.

        The schedule's multipliers are functions, which are not saved: they are already this run's."""
        net: Any = pl_module  # an ImageClassifier: configure_optimizers builds its groups the same way
        groups = param_groups(
            net.named_parameters(), net.no_decay, net.head, self.cfg.weight_decay, backbone=bool(self.cfg.pretrained)
        )
        for optimizer, scheduler in zip(checkpoint["optimizer_states"], checkpoint["lr_schedulers"], strict=True):
            scale = [self.cfg.lr / base for base in scheduler["base_lrs"]]
            for group, ours, factor in zip(optimizer["param_groups"], groups, scale, strict=True):
                group.update(lr=group["lr"] * factor, initial_lr=self.cfg.lr, weight_decay=ours["weight_decay"])
            scheduler["_last_lr"] = [lr * factor for lr, factor in zip(scheduler["_last_lr"], scale, strict=True)]
            scheduler["base_lrs"] = [self.cfg.lr] * len(scale)
