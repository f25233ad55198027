"""What every test of either task shares: the project root, and its scripts run as a user runs them.

tests/<task>/ hold each task's tests and its tiny CPU flags (the engine's own suite ships with the engine). tests/ and
its folders are packages (tests.image_classification.conftest, ...): several conftest.py files, or test files of one
name in two folders, never shadow each other, and a folder named like the project's package (language_model) cannot
hide it. The files at tests/ itself import this one as `conftest` (pyproject's pythonpath has tests/). The helpers and
fixtures for runs on a shared machine are the engine's (lightning_gpu_engine.testing), shared with its suite.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightning_gpu_engine import testing
from lightning_gpu_engine.testing import (
    SAVING,
    TIMEOUT,
    Launch,
    edited,
    finish,
    free_port,
    heavy_imports_blocked,
    kill_at_pause,
    master_port,
    multiprocess_tests_one_at_a_time,
    one_error_line,
    private_caches,
    references,
    wait,
    wait_until,
)

# the bake's task's: its tiny flags (tiny_args), and its refusals of missing files
from tests.{{ cookiecutter.task.replace("-", "_") }}.conftest import MISSING_INPUTS, TINY

ROOT = Path(__file__).resolve().parents[1]
__all__ = [
    "MISSING_INPUTS",
    "ROOT",
    "SAVING",
    "TIMEOUT",
    "TINY",
    "Launch",
    "edited",
    "finish",
    "free_port",
    "heavy_imports_blocked",
    "kill_at_pause",
    "launch",
    "master_port",
    "multiprocess_tests_one_at_a_time",
    "one_error_line",
    "private_caches",
    "references",
    "run_script",
    "run_train",
    "script_env",
    "wait",
    "wait_until",
    "without_heavy_imports",
]


@pytest.fixture
def tiny_args(tmp_path: Path) -> list[str]:
    """One epoch of the bake's task at its tiniest, into tmp_path/run."""
    return [*TINY, "--max-epochs=1", f"--output-dir={tmp_path / 'run'}"]


def script_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, src/ and the root importable even if the project is not installed, one thread per process
    on shared cores; `extra` adds to it."""
    return testing.script_env(ROOT, extra)


def run_script(
    script: str | Path,
    *args: str,
    timeout: float = 300,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    new_session: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python SCRIPT ARGS` in a process of its own (warm_starts), as a user would run it. SCRIPT is relative to the
    root, or absolute."""
    return testing.run_script(
        ROOT / script, *args, root=ROOT, timeout=timeout, cwd=cwd, env=env, new_session=new_session
    )


def run_train(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python train.py ARGS`: the bake's task, as a user trains it."""
    return run_script("train.py", *args, timeout=timeout)


@pytest.fixture
def launch() -> Iterator[Launch]:
    """Starts a command in the project root, each in a process group of its own, killed if still running at the end."""
    with testing.launching(ROOT) as start:
        yield start


def without_heavy_imports(folder: Path) -> dict[str, str]:
    """An environment (for run_script's `env`) in which importing torch or Lightning fails with a traceback."""
    return testing.without_heavy_imports(folder, ROOT)
