"""A task's script run as its users run it, with the conformance suite watching: `python FOLDER/<script's name> ARGS`
runs a copy of WATCHED, which runs the script itself (its own `__main__`, so its own TASK trains) with one callback
more. That callback
- saves, at the end of fit, each rank's `module_tensors`, the names of its parameters and the epoch's length in steps
  to DUMP/rank<N>.pt,
- with `pause_after`, waits at that step, after its periodic checkpoint, for the test's SIGKILL, once rank 0 has said
  "paused at step N",
- with `stop_at`, sends SIGTERM to the run's process group (from rank 0) as that step's batch begins: a scheduler's
  stop, landing on the step the test chose.

Lightning starts the other ranks by running the same file again, so every rank is watched alike.
"""

from __future__ import annotations

import math
import os
import runpy
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint
from torch import Tensor, nn

from lightning_gpu_engine.testing.trainers import trainers_with

WATCHED = """from lightning_gpu_engine.testing.watched import watch

watch({script!r}, {dump!r}, pause_after={pause_after}, stop_at={stop_at})
"""


def watched(folder: Path, script: Path, dump: Path, pause_after: int = 0, stop_at: int = 0) -> Path:
    """The script to run in place of `script`: named as it is (its --help and messages say its name), in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / script.name
    path.write_text(WATCHED.format(script=str(script), dump=str(dump), pause_after=pause_after, stop_at=stop_at))
    return path


def steps_per_epoch(trainer: L.Trainer) -> int:
    return math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches)


def module_tensors(module: nn.Module) -> dict[str, Tensor]:
    """Every tensor the module holds, by name: its parameters and buffers (persistent or not), and the tensors its
    modules keep as plain attributes, alone or in lists, tuples and dicts (a queue, a running count)."""
    found: dict[str, Tensor] = dict(module.named_parameters(remove_duplicate=False))
    found |= dict(module.named_buffers(remove_duplicate=False))
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for key, value in vars(sub).items():
            if key not in ("_parameters", "_buffers", "_modules"):
                found |= _tensors(value, f"{prefix}.{key}" if prefix else key, depth=3)
    return {name: t.detach().cpu().clone() for name, t in found.items()}


def _tensors(value: Any, name: str, depth: int) -> dict[str, Tensor]:
    if isinstance(value, Tensor):
        return {name: value}
    if depth == 0:
        return {}
    if isinstance(value, Mapping):
        items = [(f"{name}[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, list | tuple):
        items = [(f"{name}[{i}]", v) for i, v in enumerate(value)]
    else:
        return {}
    return {k: t for key, v in items for k, t in _tensors(v, key, depth - 1).items()}


class Watch(Checkpoint):  # a Checkpoint: Lightning calls it after the others, so its pause comes after their saves
    def __init__(self, dump: Path, pause_after: int, stop_at: int) -> None:
        self.dump, self.pause_after, self.stop_at = dump, pause_after, stop_at

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        if trainer.global_step + 1 == self.stop_at and trainer.is_global_zero:  # the batch that makes that step
            os.killpg(os.getpgid(0), signal.SIGTERM)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if 0 < self.pause_after == trainer.global_step:
            if trainer.is_global_zero:
                print(f"paused at step {self.pause_after}", flush=True)
            while True:  # until the test's SIGKILL
                signal.pause()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.dump.mkdir(parents=True, exist_ok=True)
        state = {
            "tensors": module_tensors(pl_module),
            "parameters": [name for name, _ in pl_module.named_parameters()],
            "steps_per_epoch": steps_per_epoch(trainer),
        }
        torch.save(state, self.dump / f"rank{trainer.global_rank}.pt")


def watch(script: str, dump: str, pause_after: int = 0, stop_at: int = 0) -> None:
    """Runs `script` as `python script` would, but from this file, with `Watch` among its callbacks."""
    trainers_with(Watch(Path(dump), pause_after, stop_at))
    sys.path[0] = str(Path(script).parent)  # what `python script` puts first; sys.argv[0] stays this file's
    runpy.run_path(script, run_name="__main__")
