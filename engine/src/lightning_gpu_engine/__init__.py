"""The task-agnostic engine, and its front door: every name a task or a project's scripts may use is listed here (a
project's bench.py and sweep.py also use `bench`'s and `sweep`'s), and nothing outside imports one of its modules (a
project's tests/test_engine_use.py checks it).

Start at `train` (training.py: the order of a run), then `Task` (what a task gives the engine), `EngineModule` and
the loaders (what a task's LightningModule and DataModule build on), and `testing.TaskConformance` (the proof that a
task keeps every feature). Each part lists its own public names in its `__all__`, and this door re-exports them; the
names that need torch or Lightning are imported on first use, so `train.py --help` and a bad flag answer at once.

Layer 9: imports `config`, `tools`, `checkpoint`, `data`, `perf`, `reliability`, `trainer`, `moved`, `task`, `training`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from lightning_gpu_engine import checkpoint, config, data, perf, reliability, tools, trainer
from lightning_gpu_engine.moved import alias_engine
from lightning_gpu_engine.task import AFRESH, RECORD, SCHEDULE, Task, first_dim, saved_record
from lightning_gpu_engine.tools.first_use import first_use, typed_imports
from lightning_gpu_engine.training import train

if TYPE_CHECKING:  # what type checkers see, and where each name is imported from on first use
    from lightning_gpu_engine.checkpoint import *  # noqa: F403
    from lightning_gpu_engine.config import *  # noqa: F403
    from lightning_gpu_engine.data import *  # noqa: F403
    from lightning_gpu_engine.module import EngineModule, clean_name, run_hparams, warmup_cosine
    from lightning_gpu_engine.optimizers import no_decay_names
    from lightning_gpu_engine.perf import *  # noqa: F403
    from lightning_gpu_engine.reliability import *  # noqa: F403
    from lightning_gpu_engine.testing.conformance import TaskConformance
    from lightning_gpu_engine.tools import *  # noqa: F403
    from lightning_gpu_engine.trainer import *  # noqa: F403

# The names of the engine's top-level modules; each part's are its own `__all__`
__all__ = [
    "AFRESH",
    "RECORD",
    "SCHEDULE",
    "EngineModule",
    "Task",
    "TaskConformance",
    "alias_engine",
    "clean_name",
    "first_dim",
    "no_decay_names",
    "run_hparams",
    "saved_record",
    "train",
    "warmup_cosine",
]
# The typing spec's form: pyright follows it; mypy (python/mypy#15300) does not, so its `import *` of this door
# misses the parts' names (each named import is typed)
__all__ += checkpoint.__all__
__all__ += config.__all__
__all__ += data.__all__
__all__ += perf.__all__
__all__ += reliability.__all__
__all__ += tools.__all__
__all__ += trainer.__all__

_HEAVY = typed_imports(__name__)  # name: (module, its name there), imported when first used
_first_use = first_use(__name__, _HEAVY)
# 1.2's names of `train`: `main` returned the metrics, `run` was train.py's body; train is both
_OLD_NAMES = ("main", "run")


def __getattr__(name: str) -> Any:
    if name in _OLD_NAMES:
        warnings.warn(
            f"{__name__}.{name} is {__name__}.train since lightning-gpu-engine 1.3 (train(task, argv) returns the "
            "metrics); the old name goes in 1.4",
            DeprecationWarning,
            stacklevel=2,
        )
        return train
    return _first_use(name)
