"""The task-agnostic engine, and its one front door: every name a task, `bench/`, `sweep/` or a root script may use
is listed here, and nothing outside `engine/` imports one of its modules (tests/engine/test_front_door.py checks it).

Start at `run.main` (the order of a run), then `Task` (what a task gives the engine), `EngineModule` and the loaders
(what a task's LightningModule and DataModule build on), and `testing.TaskConformance` (the proof that a task keeps
every feature). The names that need torch or Lightning are imported on first use, so `train.py --help` and a bad flag
answer at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Light: options, the Task, the entry point's loop, files and one-line messages import neither torch nor Lightning.
from .cli import OneLineParser, converter, fail, note, parse_options, parse_run, read_yaml
from .config import Config, ConfigError, check_choices, check_path, opt, parse_betas
from .files import (
    OutputBusyError,
    PartialFolder,
    check_output,
    check_place,
    commit,
    discard,
    open_output,
    open_partial,
    partial_path,
    publish,
    write_text,
)
from .quiet import set_up_warnings
from .run import main, run
from .rundir import check_writable_dir, last_path
from .task import AFRESH, RECORD, SCHEDULE, Task, TaskDefault, first_dim, saved_record

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ imports each when first used
    from .checkpoint_checks import check_checkpoint, read_checkpoint
    from .guards import check_enough_data
    from .hardware import Hardware, apply_backend_flags, cpus_per_device
    from .hardware import resolve as resolve_hardware
    from .loaders import eval_loader, train_loader
    from .module import EngineModule, clean_name, no_decay_names, run_hparams, warmup_cosine
    from .monitors import HALF
    from .networks import batch_flops, check_module
    from .peaks import HALF_PRECISIONS, device_peak, peak_flops
    from .promises import RunPromises
    from .signals import run_stoppable
    from .streaming import StreamedItems, read_made_by
    from .streaming_write import chunks_output, parse_chunk_bytes, write_chunks
    from .testing import TaskConformance
    from .trainer import build_trainer, fsdp_units, launched_as_global_zero, measuring_trainer

# name: (module, attribute in it)
_HEAVY = {
    "check_checkpoint": ("checkpoint_checks", "check_checkpoint"),
    "check_enough_data": ("guards", "check_enough_data"),
    "Hardware": ("hardware", "Hardware"),
    "apply_backend_flags": ("hardware", "apply_backend_flags"),
    "cpus_per_device": ("hardware", "cpus_per_device"),
    "resolve_hardware": ("hardware", "resolve"),
    "eval_loader": ("loaders", "eval_loader"),
    "train_loader": ("loaders", "train_loader"),
    "EngineModule": ("module", "EngineModule"),
    "clean_name": ("module", "clean_name"),
    "no_decay_names": ("module", "no_decay_names"),
    "run_hparams": ("module", "run_hparams"),
    "warmup_cosine": ("module", "warmup_cosine"),
    "HALF": ("monitors", "HALF"),
    "batch_flops": ("networks", "batch_flops"),
    "check_module": ("networks", "check_module"),
    "HALF_PRECISIONS": ("peaks", "HALF_PRECISIONS"),
    "device_peak": ("peaks", "device_peak"),
    "peak_flops": ("peaks", "peak_flops"),
    "read_checkpoint": ("checkpoint_checks", "read_checkpoint"),
    "RunPromises": ("promises", "RunPromises"),
    "run_stoppable": ("signals", "run_stoppable"),
    "StreamedItems": ("streaming", "StreamedItems"),
    "chunks_output": ("streaming_write", "chunks_output"),
    "parse_chunk_bytes": ("streaming_write", "parse_chunk_bytes"),
    "read_made_by": ("streaming", "read_made_by"),
    "write_chunks": ("streaming_write", "write_chunks"),
    "TaskConformance": ("testing", "TaskConformance"),
    "build_trainer": ("trainer", "build_trainer"),
    "fsdp_units": ("trainer", "fsdp_units"),
    "launched_as_global_zero": ("trainer", "launched_as_global_zero"),
    "measuring_trainer": ("trainer", "measuring_trainer"),
}
__all__ = [  # the light names and those of _HEAVY, sorted
    "AFRESH",
    "HALF",
    "HALF_PRECISIONS",
    "RECORD",
    "SCHEDULE",
    "Config",
    "ConfigError",
    "EngineModule",
    "Hardware",
    "OneLineParser",
    "OutputBusyError",
    "PartialFolder",
    "RunPromises",
    "StreamedItems",
    "Task",
    "TaskConformance",
    "TaskDefault",
    "apply_backend_flags",
    "batch_flops",
    "build_trainer",
    "check_checkpoint",
    "check_choices",
    "check_enough_data",
    "check_module",
    "check_output",
    "check_path",
    "check_place",
    "check_writable_dir",
    "chunks_output",
    "clean_name",
    "commit",
    "converter",
    "cpus_per_device",
    "device_peak",
    "discard",
    "eval_loader",
    "fail",
    "first_dim",
    "fsdp_units",
    "last_path",
    "launched_as_global_zero",
    "main",
    "measuring_trainer",
    "no_decay_names",
    "note",
    "open_output",
    "open_partial",
    "opt",
    "parse_betas",
    "parse_chunk_bytes",
    "parse_options",
    "parse_run",
    "partial_path",
    "peak_flops",
    "publish",
    "read_checkpoint",
    "read_made_by",
    "read_yaml",
    "resolve_hardware",
    "run",
    "run_hparams",
    "run_stoppable",
    "saved_record",
    "set_up_warnings",
    "train_loader",
    "warmup_cosine",
    "write_chunks",
    "write_text",
]


def __getattr__(name: str) -> Any:
    if name not in _HEAVY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _HEAVY[name]
    return getattr(importlib.import_module(f".{module}", __name__), attribute)
