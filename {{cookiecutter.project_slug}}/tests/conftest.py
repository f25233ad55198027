"""One tiny CPU setup shared by every test: 16 px images, 32 training samples, batches of 8."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_args(tmp_path: Path) -> list[str]:
    # Pinned, not left to the bake's defaults: 16-mixed and fsdp need CUDA, and these tests must run on any CPU.
    return [
        "--accelerator=cpu",
        "--precision=32-true",
        "--strategy=auto",
        "--image-size=16",
        "--batch-size=8",
        "--train-samples=32",
        "--num-workers=0",
        "--max-epochs=1",
        "--logger=csv",
        "--log-every-n-steps=1",
        f"--output-dir={tmp_path / 'run'}",
    ]


def run_train(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python train.py ARGS` in a fresh process, as a user would run it (src/ on the path even if not installed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
