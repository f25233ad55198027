"""The conformance suite a task's tests subclass, and the helpers a project's tests use to run its scripts as users do
and to watch what the runs do.

Its `__all__`: the names a project's tests import from here, and from nowhere else inside the engine (the project's
tests/test_engine_use.py checks it). Each is imported when first used, from where the TYPE_CHECKING block below
imports it, so a script run under a test (ranks.py, watched.py) loads only what it uses.

Layer 10: imports `lightning_gpu_engine`, `tools`, `checkpoint` and `trainer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_gpu_engine.tools.first_use import first_use

if TYPE_CHECKING:  # what type checkers see, and where each name is imported from on first use
    from lightning_gpu_engine.testing.conformance import TaskConformance
    from lightning_gpu_engine.testing.fixtures import (
        master_port,
        multiprocess_tests_one_at_a_time,
        private_caches,
        references,
    )
    from lightning_gpu_engine.testing.machine_sharing import free_port
    from lightning_gpu_engine.testing.processes import (
        SAVING,
        TIMEOUT,
        Launch,
        edited,
        finish,
        heavy_imports_blocked,
        kill_at_pause,
        launching,
        one_error_line,
        run_script,
        script_env,
        wait,
        wait_until,
        without_heavy_imports,
    )
    from lightning_gpu_engine.testing.ranks import RANKS_SCRIPT, DumpRank, assert_ranks_agree, load_ranks
    from lightning_gpu_engine.testing.reference_runs import ReferenceRuns
    from lightning_gpu_engine.testing.script_runs import validations
    from lightning_gpu_engine.testing.trainers import trainers_with
    from lightning_gpu_engine.testing.warm_starts import popen, run

__all__ = [
    "RANKS_SCRIPT",
    "SAVING",
    "TIMEOUT",
    "DumpRank",
    "Launch",
    "ReferenceRuns",
    "TaskConformance",
    "assert_ranks_agree",
    "edited",
    "finish",
    "free_port",
    "heavy_imports_blocked",
    "kill_at_pause",
    "launching",
    "load_ranks",
    "master_port",
    "multiprocess_tests_one_at_a_time",
    "one_error_line",
    "popen",
    "private_caches",
    "references",
    "run",
    "run_script",
    "script_env",
    "trainers_with",
    "validations",
    "wait",
    "wait_until",
    "without_heavy_imports",
]
__getattr__ = first_use(__name__)
