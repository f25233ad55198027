"""The mechanics every part stands on: files written whole or not at all, the run folder and its lock, object
storage within a bound, and the stop signals a run waits on.

Its `__all__`: the names the front door re-exports from it, light enough to import with it.

Layer 1: imports `config`.
"""

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
from lightning_gpu_engine.tools.signals import run_stoppable

__all__ = [
    "OutputBusyError",
    "PartialFolder",
    "check_output",
    "check_place",
    "check_writable_dir",
    "commit",
    "discard",
    "last_path",
    "open_output",
    "open_partial",
    "partial_path",
    "publish",
    "run_stoppable",
    "write_text",
]
