"""The benchmark's parts for a project's bench.py, imported from here: timing, loader speed, the report, and any
task's rows (`any_task`).

Layer 10: imports `lightning_gpu_engine`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports each when first used (torch, Lightning)
    from lightning_gpu_engine.bench import any_task
    from lightning_gpu_engine.bench.harness import (
        Clock,
        Setting,
        Spec,
        Timing,
        interleaved_rounds,
        peak_flops,
        prepare,
        quiet_trainers,
        time_fit,
    )
    from lightning_gpu_engine.bench.loaders import TIMED_BATCHES, Row, samples_per_second, worker_counts
    from lightning_gpu_engine.bench.report import (
        check_json,
        device_name,
        figures_file,
        ratio_line,
        repeat_lines,
        spread,
        table,
        write_json,
    )
    from lightning_gpu_engine.bench.task_module import check_task, peek_task

_MODULE = {  # name: its module
    "Clock": "harness",
    "Setting": "harness",
    "Spec": "harness",
    "Timing": "harness",
    "interleaved_rounds": "harness",
    "peak_flops": "harness",
    "prepare": "harness",
    "quiet_trainers": "harness",
    "time_fit": "harness",
    "TIMED_BATCHES": "loaders",
    "Row": "loaders",
    "samples_per_second": "loaders",
    "worker_counts": "loaders",
    "check_json": "report",
    "device_name": "report",
    "figures_file": "report",
    "ratio_line": "report",
    "repeat_lines": "report",
    "spread": "report",
    "table": "report",
    "write_json": "report",
    "check_task": "task_module",
    "peek_task": "task_module",
}
__all__ = [
    "TIMED_BATCHES",
    "Clock",
    "Row",
    "Setting",
    "Spec",
    "Timing",
    "any_task",
    "check_json",
    "check_task",
    "device_name",
    "figures_file",
    "interleaved_rounds",
    "peak_flops",
    "peek_task",
    "prepare",
    "quiet_trainers",
    "ratio_line",
    "repeat_lines",
    "samples_per_second",
    "spread",
    "table",
    "time_fit",
    "worker_counts",
    "write_json",
]


def __getattr__(name: str) -> Any:
    if name == "any_task":
        return importlib.import_module(".any_task", __name__)
    if name not in _MODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_MODULE[name]}", __name__), name)
