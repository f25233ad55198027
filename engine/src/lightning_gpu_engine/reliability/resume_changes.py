"""Resuming with options that differ from the checkpoint's: each change is refused, honoured or free, never silent.

Every checkpoint records the options of the run that wrote it (`RunRecord`). On `--resume`, `check_changes` compares
them with this run's before anything starts: a change that would make the checkpoint mean something else is refused in
one line; one that can be honoured is said in one line and applied to the checkpoint as Lightning loads it, since the
optimizer and scheduler states it restores would otherwise bring back the old values. The guide's reliability.md
lists the same decisions; the engine's tests/test_resume_changes.py checks that every option of Config is in one group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

import lightning as L
from lightning.fabric.utilities.data import AttributeDict
from lightning.pytorch.callbacks import Callback

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError, as_flag, parse_betas
from lightning_gpu_engine.module import EngineModule, engine_built_optimizer
from lightning_gpu_engine.reliability.global_batch import check_global_batch, move_position
from lightning_gpu_engine.reliability.own_optimizers import (
    ENGINE_OPTIMIZER,
    LENGTH,
    ReadsNoted,
    builds_its_own,
    check_fixed_ends,
    ignored_options,
    keep_recorded,
)
from lightning_gpu_engine.task import AFRESH, RECORD, SCHEDULE, Task, saved_record

# What a change would silently alter, were it accepted. A task's options are refused too unless it says otherwise.
REFUSED = {
    "seed": "the shuffle order and any data made from the seed follow it",
    "ema": "with --ema its weights are the average, without it there is no average to continue",
    "strategy": "FSDP saves the optimizer state in another layout",  # only to or from fsdp
    "optimizer": "the saved optimizer state is the other optimizer's",
}
HONOURED = {
    "lr": "the schedule continues at the new peak (the optimizer's and scheduler's saved rates are rescaled)",
    "weight_decay": "applies from the next step (it replaces the value saved in the optimizer state)",
    "muon_lr": "Muon's part of the schedule continues at the new peak (its saved rates are rescaled)",
    "betas": "apply from the next step (they replace those saved in the optimizer state; its averages carry on)",
    "max_epochs": SCHEDULE,
    "max_steps": SCHEDULE,
    "warmup_fraction": SCHEDULE,
    "ema_decay": "the average continues with it from the current step",
}
# A module that builds its own optimizers uses none of ENGINE_OPTIMIZER as the engine would: its saved state comes
# back exactly as saved; and the run's LENGTH only where its schedulers can go on (own_optimizers.py)
OWN_LENGTH = "the run goes on to it; the module's own schedulers go on from their saved state"
# Honoured while their product, the global batch, stays the same: the schedule and the epoch are counted in its steps
GLOBAL_BATCH = ("batch_size", "accumulate_grad_batches", "devices", "num_nodes")
# Checked on its own: not searched again
OWN_CHECK = ("auto_batch_size",)
# How the run computes, reports and saves, never what it learns: applied as given, without a word
FREE = (
    "accelerator",
    "precision",
    "compile",
    "compile_mode",
    "compile_cache",
    "checkpoint_format",  # a resume reads either; the next saves take the new one
    "async_save",
    "channels_last",
    "tf32",
    "sync_batchnorm",
    "fsdp_sharding",
    "activation_checkpointing",
    "num_workers",
    "gradient_clip_val",
    "deterministic",
    "output_dir",
    "resume",
    "logger",
    "log_every_n_steps",
    "checkpoint_every",
    "keep_last",
    "store_timeout",
    "val_every",
    "val_batches",
    "fast_dev_run",
    "profile",
)
TASK_OPTION = "it is one of the task's options, which the checkpoint was trained with"
COUNTS = ("world_size", "train_items", "train_batches")  # what RunRecord saves beside the options


def recorded_options(checkpoint: dict[str, Any], names: Collection[str] = ()) -> dict[str, Any]:
    """The options that trained `checkpoint`; without a record (an older checkpoint), those of `names` (default: the
    engine's) that its hparams hold."""
    hparams = {**(checkpoint.get("datamodule_hyper_parameters") or {}), **(checkpoint.get("hyper_parameters") or {})}
    known = {*Config.__dataclass_fields__, *names}
    return {**{k: v for k, v in hparams.items() if k in known}, **saved_record(checkpoint)}


def keep_batch_size(cfg: Config, checkpoint: dict[str, Any]) -> list[str]:
    """--auto-batch-size on resume: the search would change the global batch mid-run, so it keeps the checkpoint's."""
    saved = recorded_options(checkpoint).get("batch_size")
    if not cfg.auto_batch_size or saved is None:
        return []
    cfg.batch_size, cfg.auto_batch_size = saved, False  # recorded as used: no search, the checkpoint's size
    return [f"--auto-batch-size is not searched again: the run continues with the checkpoint's --batch-size {saved}"]


def check_changes(checkpoint: dict[str, Any], cfg: Config, opts: Any, task: Task, world_size: int) -> list[str]:
    """Refuse (ConfigError) a change that alters what the checkpoint means; else one line per honoured change."""
    new = {**dataclasses.asdict(cfg), **dataclasses.asdict(opts)}
    old = recorded_options(checkpoint, new)
    own = [f.name for f in dataclasses.fields(opts)]
    check_same_task(checkpoint, own, task)
    refused = {**REFUSED, **task.refused_on_resume}
    refused |= {n: TASK_OPTION for n in own if n not in {*refused, *task.honoured_on_resume, *task.free_on_resume}}
    for name, why in refused.items():
        before, after = old.get(name, new[name]), new[name]
        if name == "strategy" and (before == "fsdp") == (after == "fsdp"):
            continue
        if before != after:
            raise ConfigError(
                name,
                f"the checkpoint was trained with {before}, not {after}; {why}: resume with "
                f"{as_flag(name, before)}, {AFRESH}",
            )
    notes = [
        f"{as_flag(name, new[name])} instead of the checkpoint's {old[name]}: {why}"
        for name, why in {**HONOURED, **task.honoured_on_resume}.items()
        if old.get(name, new[name]) != new[name] and name not in (*ENGINE_OPTIMIZER, *LENGTH)
    ]
    return notes + check_global_batch(old, cfg, world_size)


def check_same_task(checkpoint: dict[str, Any], own: Collection[str], task: Task) -> None:
    """Another task's checkpoint, refused as predict.py and generate.py refuse it: its record names options this task
    has not, and lacks some of this task's (an option added to the task since, or one dropped, is not enough)."""
    theirs = set(saved_record(checkpoint)) - {*Config.__dataclass_fields__, *COUNTS}
    unknown, missing = theirs - set(own), set(own) - theirs
    if unknown and missing:
        flags = ", ".join("--" + name.replace("_", "-") for name in sorted(unknown))
        raise ConfigError(
            "resume",
            f"the checkpoint is not a checkpoint of {task.name} (another task's?): it was trained with {flags}, "
            f"options this task has not; give one of its own, {AFRESH}",
        )


def optimizer_changes(checkpoint: dict[str, Any], cfg: Config, model: L.LightningModule) -> list[str]:
    """Once the module is built, the changed options of ENGINE_OPTIMIZER and LENGTH: honoured for the engine's
    optimizer and schedule; for a module's own, whose param groups and schedulers come back as saved, said to be
    ignored and given the checkpoint's values back, and the length honoured, as the run's, where its schedulers can
    go on to it."""
    new = dataclasses.asdict(cfg)
    old = recorded_options(checkpoint, new)
    mine = [name for name in HONOURED if name in (*ENGINE_OPTIMIZER, *LENGTH)]
    changed = [name for name in mine if old.get(name, new[name]) != new[name]]
    if engine_built_optimizer(model):
        said = [f"instead of the checkpoint's {old[name]}: {HONOURED[name]}" for name in changed]
    else:
        check_fixed_ends(checkpoint, old, cfg, model)  # before any line says that they go on
        own = f"{builds_its_own(model)}, whose saved state comes back as it was saved"
        said = [
            f"instead of the checkpoint's {old[name]}: {OWN_LENGTH}"
            if name in LENGTH
            else f"is ignored (the checkpoint's was {old[name]}): {own}"
            for name in changed
        ]
        keep_recorded(cfg, model, {name: old[name] for name in changed if name not in LENGTH})
    return [f"{as_flag(name, new[name])} {words}" for name, words in zip(changed, said, strict=True)]


class RunRecord(Callback):
    """Records this run's options in every checkpoint; on resume, applies the honoured changes to the checkpoint.

    Lightning calls `on_load_checkpoint` before it restores the loops, the optimizer and the scheduler from the same
    dictionary, so what is changed here is what they restore.
    """

    def __init__(self, cfg: Config, opts: Any, world_size: int, task: Task) -> None:
        self.cfg, self.opts, self.world_size, self.task = cfg, opts, world_size, task
        self.resumed = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        own = stage == "fit" and not engine_built_optimizer(pl_module)
        if own and isinstance(pl_module.hparams, AttributeDict):  # what its configure_optimizers reads of them
            pl_module._hparams = ReadsNoted(pl_module.hparams)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """On a fresh run, the engine's options given that a module's own optimizers ignore, said in one line."""
        hparams = pl_module.hparams
        if not isinstance(hparams, ReadsNoted):
            return
        pl_module._hparams = AttributeDict(hparams)  # read as the optimizers were built; saved as a plain one
        said = ignored_options(self.cfg, self.task, pl_module, trainer.optimizers, hparams.read)
        if said is not None and not self.resumed and trainer.is_global_zero:  # a resume says each change itself
            print(f"warning: {said}", flush=True)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        loader = trainer.train_dataloader
        checkpoint[RECORD] = {
            **dataclasses.asdict(self.cfg),
            **dataclasses.asdict(self.opts),
            "world_size": self.world_size,
            "train_items": len(loader.dataset) if loader is not None else None,  # type: ignore[arg-type]
            "train_batches": trainer.num_training_batches,  # per device: a position there is the epoch's end
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self.resumed = True
        move_position(checkpoint, recorded_options(checkpoint), self.cfg.batch_size, self.world_size)
        if engine_built_optimizer(pl_module):  # a module's own optimizers are its own: restored as saved
            self._rescale_optimizer(checkpoint, trainer, pl_module)

    def _rescale_optimizer(self, checkpoint: dict[str, Any], trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The saved state of EngineModule's optimizer and schedule holds the old peak rate, weight decay and betas;
        this run's replace them.

        The schedule's multipliers are functions, which are not saved: they are already this run's. A sharded FSDP2
        checkpoint has no optimizer_states: Lightning loaded them into the optimizers already, so those change."""
        states = checkpoint.get("optimizer_states") or [{"param_groups": o.param_groups} for o in trainer.optimizers]
        if not states:  # a test: no optimizer
            return
        assert isinstance(pl_module, EngineModule)
        muon, adamw = pl_module.optimizer_groups()
        ours = muon + adamw  # which groups decay
        # one AdamW (or MuonWithAdamW) and its LambdaLR: EngineModule.configure_optimizers
        [optimizer], [scheduler] = states, checkpoint["lr_schedulers"]
        # --optimizer muon: Muon's groups come first, and peak at --muon-lr
        peaks = [self.cfg.muon_lr] * len(muon) + [self.cfg.lr] * (len(optimizer["param_groups"]) - len(muon))
        scale = [peak / base for peak, base in zip(peaks, scheduler["base_lrs"], strict=True)]
        for i, (group, factor, peak) in enumerate(zip(optimizer["param_groups"], scale, peaks, strict=True)):
            group.update(lr=group["lr"] * factor, initial_lr=peak, weight_decay=ours[i]["weight_decay"])
            if i >= len(muon):
                group["betas"] = parse_betas(self.cfg.betas)
        scheduler["_last_lr"] = [lr * factor for lr, factor in zip(scheduler["_last_lr"], scale, strict=True)]
        scheduler["base_lrs"] = peaks
