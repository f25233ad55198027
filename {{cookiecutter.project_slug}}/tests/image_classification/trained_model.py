"""A tiny classifier trained once per test session by train.py on generated image files, for predict and export tests.

Three classes (the dominant colour) of noisy PNGs of mixed sizes and aspect ratios: training, validation, and
held-out images that training never sees. A few seconds of CPU training reach (near) perfect accuracy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from conftest import ROOT, run_train
from lightning_gpu_engine import testing
from torchvision.io import write_png

COLOURS = {"blue": (40, 60, 210), "green": (40, 190, 60), "red": (200, 40, 40)}


def write_images(root: Path, per_class: int, seed: int) -> list[tuple[Path, str]]:
    """`per_class` images of each colour class in root/<class>/, sizes 20-47 px each side; (path, class) pairs."""
    rng = np.random.default_rng(seed)
    written = []
    for name, colour in COLOURS.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            h, w = rng.integers(20, 48, 2)
            pixels = np.array(colour)[:, None, None] + rng.normal(0, 40, (3, h, w))
            path = root / name / f"{i:03d}.png"
            write_png(torch.from_numpy(np.clip(pixels, 0, 255).astype(np.uint8)), str(path))
            written.append((path, name))
    return written


def trained_checkpoint(base: Path) -> tuple[Path, list[tuple[Path, str]]]:
    """The checkpoint of a run on generated files under `base` (trained on first use), and the held-out images."""
    checkpoint = base / "run" / "checkpoints" / "last.ckpt"
    held = sorted((p, p.parent.name) for p in (base / "held").rglob("*.png"))
    if checkpoint.is_file():
        return checkpoint, held
    write_images(base / "data" / "train", 32, seed=1)
    write_images(base / "data" / "val", 8, seed=2)
    held = write_images(base / "held", 10, seed=3)
    result = run_train(
        *("--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--num-workers=0", "--logger=csv"),
        *("--model=timm/test_resnet", "--image-size=16", "--batch-size=16", "--max-epochs=2"),
        *("--data=folder", f"--data-dir={base / 'data'}", f"--output-dir={base / 'run'}"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return checkpoint, held


def run_script(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python predict.py ARGS` (or export.py) in a process of its own, as a user runs it."""
    return run_python(str(ROOT / script), *args)


def run_python(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python ARGS` in the project root, src/ importable as if installed, one thread per process on shared cores."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env["OMP_NUM_THREADS"] = "1"
    return testing.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
