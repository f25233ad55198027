"""One tiny CPU setup shared by every test: a 2-block model, sequences of 32 tokens, batches of 8."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# Pinned, not left to the bake's defaults: 16-mixed and fsdp need CUDA, and these tests must run on any CPU.
TINY = [
    "--accelerator=cpu",
    "--precision=32-true",
    "--strategy=auto",
    "--model=tiny",
    "--context=32",
    "--batch-size=8",
    "--train-tokens=20000",
    "--num-workers=0",
    "--logger=csv",
    "--log-every-n-steps=1",
]


@pytest.fixture
def tiny_args(tmp_path: Path) -> list[str]:
    return [*TINY, "--max-epochs=1", f"--output-dir={tmp_path / 'run'}"]


def run_script(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python SCRIPT ARGS` in a fresh process, as a user would run it (src/ on the path even if not installed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(ROOT / script), *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired as err:  # a hang fails its test with what the run printed, not a bare timeout
        out, errors = (s.decode() if isinstance(s, bytes) else s or "" for s in (err.stdout, err.stderr))
        return subprocess.CompletedProcess(command, -9, out, f"{errors}\nkilled: still running after {timeout:.0f} s")


def run_train(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_script("train.py", *args, timeout=timeout)
