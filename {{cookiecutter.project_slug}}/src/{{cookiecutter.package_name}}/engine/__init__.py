"""The task-agnostic engine: what a task imports to be trained with every speed and reliability feature.

Start at `run.main` (the order of a run), then `task.Task` (what a task gives the engine), `module.EngineModule` and
`loaders` (what a task's LightningModule and DataModule build on). The README's "Bring your own task" uses all four.
The names that need torch or Lightning are imported on first use, so `train.py --help` and a bad flag answer at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Light: the options, the Task and the entry point's loop import neither torch nor Lightning.
from .config import Config, ConfigError, opt
from .run import main, run
from .task import Task

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ imports each when first used
    from .hardware import Hardware
    from .loaders import eval_loader, train_loader
    from .module import EngineModule, run_hparams

_HEAVY = {
    "Hardware": "hardware",
    "eval_loader": "loaders",
    "train_loader": "loaders",
    "EngineModule": "module",
    "run_hparams": "module",
}
__all__ = [
    "Config",
    "ConfigError",
    "EngineModule",
    "Hardware",
    "Task",
    "eval_loader",
    "main",
    "opt",
    "run",
    "run_hparams",
    "train_loader",
]


def __getattr__(name: str) -> Any:
    if name not in _HEAVY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HEAVY[name]}", __name__), name)
