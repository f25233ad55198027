"""The task-agnostic engine, and its front door: every name a task or a project's scripts may use is listed here (a
project's bench.py and sweep.py also use `bench`'s and `sweep`'s), and nothing outside imports one of its modules (a
project's tests/test_engine_use.py checks it).

Start at `run.main` (the order of a run), then `Task` (what a task gives the engine), `EngineModule` and the loaders
(what a task's LightningModule and DataModule build on), and `testing.TaskConformance` (the proof that a task keeps
every feature). The names that need torch or Lightning are imported on first use, so `train.py --help` and a bad flag
answer at once.

Layer 9, the front door: imports `config`, `tools`, `moved`, `run` and `task` (the others on first use).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lightning_gpu_engine.tools.files import (
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
from lightning_gpu_engine.tools.rundir import check_writable_dir, last_path

# Light: options, the Task, the entry point's loop, files and one-line messages import neither torch nor Lightning.
from lightning_gpu_engine.config.cli import OneLineParser, converter, fail, note, parse_options, parse_run, read_yaml
from lightning_gpu_engine.config.options import Config, check_choices
from lightning_gpu_engine.config.quiet import set_up_warnings
from lightning_gpu_engine.config.values import ConfigError, TaskDefault, check_input, check_path, opt, parse_betas
from lightning_gpu_engine.moved import alias_engine
from lightning_gpu_engine.run import main, run
from lightning_gpu_engine.task import AFRESH, RECORD, SCHEDULE, Task, first_dim, saved_record

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ imports each when first used
    from lightning_gpu_engine.trainer.launchers import launched_as_global_zero
    from lightning_gpu_engine.optimizers import no_decay_names
    from lightning_gpu_engine.trainer.trainer import build_trainer, fsdp_units, measuring_trainer
    from lightning_gpu_engine.checkpoint.checks import check_checkpoint, read_checkpoint
    from lightning_gpu_engine.data.loaders import eval_loader, train_loader
    from lightning_gpu_engine.data.streaming import StreamedItems, read_made_by
    from lightning_gpu_engine.data.streaming_write import chunks_output, parse_chunk_bytes, write_chunks
    from lightning_gpu_engine.module import EngineModule, clean_name, run_hparams, warmup_cosine
    from lightning_gpu_engine.perf.hardware import Hardware, apply_backend_flags, cpus_per_device
    from lightning_gpu_engine.perf.hardware import resolve as resolve_hardware
    from lightning_gpu_engine.perf.monitors import HALF
    from lightning_gpu_engine.perf.networks import batch_flops, check_module
    from lightning_gpu_engine.perf.peaks import HALF_PRECISIONS, device_peak, peak_flops
    from lightning_gpu_engine.perf.promises import RunPromises
    from lightning_gpu_engine.reliability.guards import check_enough_data
    from lightning_gpu_engine.tools.signals import run_stoppable
    from lightning_gpu_engine.testing.conformance import TaskConformance

# name: (module, attribute in it)
_HEAVY = {
    "check_checkpoint": ("checkpoint.checks", "check_checkpoint"),
    "check_enough_data": ("reliability.guards", "check_enough_data"),
    "Hardware": ("perf.hardware", "Hardware"),
    "apply_backend_flags": ("perf.hardware", "apply_backend_flags"),
    "cpus_per_device": ("perf.hardware", "cpus_per_device"),
    "resolve_hardware": ("perf.hardware", "resolve"),
    "eval_loader": ("data.loaders", "eval_loader"),
    "train_loader": ("data.loaders", "train_loader"),
    "EngineModule": ("module", "EngineModule"),
    "clean_name": ("module", "clean_name"),
    "no_decay_names": ("optimizers", "no_decay_names"),
    "run_hparams": ("module", "run_hparams"),
    "warmup_cosine": ("module", "warmup_cosine"),
    "HALF": ("perf.monitors", "HALF"),
    "batch_flops": ("perf.networks", "batch_flops"),
    "check_module": ("perf.networks", "check_module"),
    "HALF_PRECISIONS": ("perf.peaks", "HALF_PRECISIONS"),
    "device_peak": ("perf.peaks", "device_peak"),
    "peak_flops": ("perf.peaks", "peak_flops"),
    "read_checkpoint": ("checkpoint.checks", "read_checkpoint"),
    "RunPromises": ("perf.promises", "RunPromises"),
    "run_stoppable": ("tools.signals", "run_stoppable"),
    "StreamedItems": ("data.streaming", "StreamedItems"),
    "chunks_output": ("data.streaming_write", "chunks_output"),
    "parse_chunk_bytes": ("data.streaming_write", "parse_chunk_bytes"),
    "read_made_by": ("data.streaming", "read_made_by"),
    "write_chunks": ("data.streaming_write", "write_chunks"),
    "TaskConformance": ("testing.conformance", "TaskConformance"),
    "build_trainer": ("trainer.trainer", "build_trainer"),
    "fsdp_units": ("trainer.trainer", "fsdp_units"),
    "launched_as_global_zero": ("trainer.launchers", "launched_as_global_zero"),
    "measuring_trainer": ("trainer.trainer", "measuring_trainer"),
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
    "alias_engine",
    "apply_backend_flags",
    "batch_flops",
    "build_trainer",
    "check_checkpoint",
    "check_choices",
    "check_enough_data",
    "check_input",
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
