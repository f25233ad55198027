"""A module that builds its own optimizers (its own configure_optimizers) and the engine's options for EngineModule's.

Those options do not reach such optimizers as the engine would set them, and the run says so rather than record or
accept them in silence: on `--resume` its optimizers and schedulers come back as saved, so a changed option is ignored
and the run records the checkpoint's value, and a scheduler built for a fixed number of steps (OneCycleLR) cannot be
stretched to a longer run; on a fresh run, an option given that its optimizers neither read nor hold is said to be
ignored.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping
from typing import Any

import lightning as L
from lightning.fabric.utilities.data import AttributeDict
from torch.optim import Optimizer

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError, as_flag, parse_betas
from lightning_gpu_engine.task import AFRESH, Task

# What EngineModule's optimizer and schedule are made of
ENGINE_OPTIMIZER = ("lr", "weight_decay", "muon_lr", "betas", "warmup_fraction")
# The run's length, which EngineModule's schedule follows, and a module's own schedulers may not
LENGTH = ("max_epochs", "max_steps")


def builds_its_own(model: L.LightningModule) -> str:
    return f"{type(model).__name__} builds its own optimizers"


def keep_recorded(cfg: Config, model: L.LightningModule, kept: Mapping[str, Any]) -> None:
    """Ignored options take the checkpoint's values back, in `cfg` (config.yaml, the checkpoints' run record) and in
    the module's hparams (hparams.yaml, the checkpoints' hyper-parameters): what they record is what the run uses."""
    for name, value in kept.items():
        if name == "betas" and not isinstance(value, str):  # an older checkpoint's hparams hold them as a list
            value = ",".join(map(str, value))
        setattr(cfg, name, value)
        # Lightning logs the initial copy save_hyperparameters made, and checkpoints the live one
        for hparams in (model.hparams, getattr(model, "_hparams_initial", {})):
            if name in hparams:
                hparams[name] = list(parse_betas(value)) if name == "betas" else value


def fixed_ends(states: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The saved schedulers that raise once stepped past `total_steps` (OneCycleLR), by kind, those a ChainedScheduler
    or SequentialLR holds included."""
    for state in states:
        if isinstance(state.get("total_steps"), int) and isinstance(state.get("last_epoch"), int):
            yield ("OneCycleLR" if "_schedule_phases" in state else "a scheduler with total_steps"), state
        yield from fixed_ends([s for s in state.get("_schedulers") or [] if isinstance(s, dict)])


def check_fixed_ends(checkpoint: dict[str, Any], old: Mapping[str, Any], cfg: Config, model: L.LightningModule) -> None:
    """A longer run than a module's own scheduler was built for is refused before it starts: restored as saved, the
    scheduler would raise at its last step + 1, mid-run."""
    changed = [name for name in LENGTH if old.get(name, getattr(cfg, name)) != getattr(cfg, name)]
    done, batches = checkpoint.get("global_step") or 0, old.get("train_batches")
    if not changed or not done or not batches:  # an older checkpoint does not say its epoch's steps
        return
    steps = math.ceil(batches / old.get("accumulate_grad_batches", 1)) * cfg.max_epochs
    steps = min(steps, cfg.max_steps) if cfg.max_steps != -1 else steps
    asked_by = " ".join(as_flag(name, getattr(cfg, name)) for name in changed)
    for kind, state in fixed_ends(checkpoint.get("lr_schedulers") or []):
        asked = state["last_epoch"] * steps // done  # at its pace so far: once an optimizer step, once an epoch, ...
        if asked > state["total_steps"]:
            keep = " ".join(as_flag(name, old[name]) for name in changed)
            raise ConfigError(
                changed[0],
                f"{type(model).__name__}'s own {kind} was built for {state['total_steps']} steps, and {asked_by} "
                f"asks it for {asked}; restored as saved, it cannot step past its end: resume with {keep}, {AFRESH} "
                "(where it is built for the whole run)",
            )


class ReadsNoted(AttributeDict):
    """A module's hparams, noting the keys read (`self.hparams["lr"]`, `.lr`, `.get("lr")`)."""

    def __init__(self, hparams: Mapping[str, Any]) -> None:
        super().__init__(hparams)
        object.__setattr__(self, "read", set())  # an attribute, not a key: AttributeDict's setattr sets keys

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


def held(name: str, value: Any, optimizers: list[Optimizer]) -> bool:
    """Whether a param group holds the option's value: the module took it some other way than its hparams (a
    warm-up fraction is held by none)."""
    groups = [group for optimizer in optimizers for group in optimizer.param_groups]
    if name == "lr":  # a scheduler moves "lr"; it keeps the rate it started from, or OneCycleLR's peak
        found = [group.get(key) for group in groups for key in ("lr", "initial_lr", "max_lr")]
    elif name == "betas":
        return any(tuple(group.get("betas", ())) == parse_betas(value) for group in groups)
    else:
        found = [group.get(name) for group in groups]
    return any(isinstance(x, int | float) and math.isclose(x, value) for x in found)


def ignored_options(
    cfg: Config, task: Task, model: L.LightningModule, optimizers: list[Optimizer], read: Collection[str]
) -> str | None:
    """On a fresh run, the line that names the engine options given (other than their defaults) that the module's own
    optimizers neither `read` from its hparams while it built them nor hold; None if there are none."""
    defaults = {name: getattr(Config, name) for name in ENGINE_OPTIMIZER} | task.default_values
    ignored = [
        as_flag(name, getattr(cfg, name))
        for name in ENGINE_OPTIMIZER
        if getattr(cfg, name) != defaults[name] and name not in read and not held(name, getattr(cfg, name), optimizers)
    ]
    if not ignored:
        return None
    flags = " and ".join([", ".join(ignored[:-1]), ignored[-1]] if len(ignored) > 1 else ignored)
    they = "it" if len(ignored) == 1 else "them"
    return (
        f"{flags} {'is' if len(ignored) == 1 else 'are'} ignored: {builds_its_own(model)}, which neither read nor "
        f"hold {they}; leave {they} out, or declare {they} in Task(not_applicable=...)"
    )
