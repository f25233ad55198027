"""The task-agnostic engine: what a task imports to be trained with every speed and reliability feature.

Start at `run.main` (the order of a run), then `task.Task` (what a task gives the engine), `module.EngineModule` and
`loaders` (what a task's LightningModule and DataModule build on). The README's "Bring your own task" uses all four.
"""

from .config import Config, ConfigError, opt
from .hardware import Hardware
from .loaders import eval_loader, train_loader
from .module import EngineModule, run_hparams
from .run import main, run
from .task import Task

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
