"""What every test of either task shares: the project root, and its scripts run as a user runs them.

tests/engine/ drives a toy task (the README's own); tests/<task>/ hold each task's tests and its tiny CPU flags. tests/
and its folders are packages (tests.engine.conftest, ...): several conftest.py files, or test files of one name in two
folders, never shadow each other, and a folder named like the project's package (language_model) cannot hide it. The
files at tests/ itself import this one as `conftest` (pyproject's pythonpath has tests/).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.{{ cookiecutter.task.replace("-", "_") }}.conftest import TINY  # the bake's task's: tiny_args

ROOT = Path(__file__).resolve().parents[1]
__all__ = ["ROOT", "TINY", "run_script", "run_train"]


@pytest.fixture
def tiny_args(tmp_path: Path) -> list[str]:
    """One epoch of the bake's task at its tiniest, into tmp_path/run (tests/engine/ has its own for the toy task)."""
    return [*TINY, "--max-epochs=1", f"--output-dir={tmp_path / 'run'}"]


def run_script(
    script: str | Path,
    *args: str,
    timeout: float = 300,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    new_session: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python SCRIPT ARGS` in a fresh process, as a user would run it: src/ and the root importable even if the
    project is not installed, one thread per process on shared cores. SCRIPT is relative to the root, or absolute;
    `env` adds to the inherited environment; `new_session` for a script that signals its own process group."""
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    full_env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **(env or {})}
    command = [sys.executable, str(ROOT / script), *args]
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            env=full_env,
            start_new_session=new_session,
        )
    except subprocess.TimeoutExpired as err:  # a hang fails its test with what the run printed, not a bare timeout
        out, errors = (s.decode() if isinstance(s, bytes) else s or "" for s in (err.stdout, err.stderr))
        return subprocess.CompletedProcess(command, -9, out, f"{errors}\nkilled: still running after {timeout:.0f} s")


def run_train(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python train.py ARGS`: the bake's task, as a user trains it."""
    return run_script("train.py", *args, timeout=timeout)
