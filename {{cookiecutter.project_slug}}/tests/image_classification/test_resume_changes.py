"""`--resume` with other image options than the checkpoint's: each change that alters what it means is refused in one
line (the engine's options are lightning-gpu-engine's tests/test_resume_changes.py's).

One first run, stopped by SIGTERM mid-epoch, is shared by every test; each resume works on its own copy of it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import ROOT, run_train
from lightning_gpu_engine import testing
from PIL import Image

from {{ cookiecutter.package_name }}.tasks.image_classification import TASK
from {{ cookiecutter.package_name }}.tasks.image_classification.config import (
    ImageOptions,
)

# 64 training images in batches of 4, two per step: 16 batches and 8 optimizer steps an epoch
STEPS_PER_EPOCH = 8


def write_images(root: Path, classes: tuple[str, ...], per_class: int) -> Path:
    rng = np.random.default_rng(0)
    for split, count in (("train", per_class), ("val", 2)):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                image = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
                Image.fromarray(image).save(root / split / name / f"{i}.png")
    return root


def common_args(data: Path) -> list[str]:
    return [
        "--accelerator=cpu",
        "--precision=32-true",
        "--strategy=auto",
        "--image-size=16",
        "--num-workers=0",
        "--logger=csv",
        "--log-every-n-steps=1",
        "--data=folder",
        f"--data-dir={data}",
        "--batch-size=4",
        "--accumulate-grad-batches=2",
        "--max-epochs=2",
    ]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run stopped by SIGTERM after its first step or two: a checkpoint in the middle of an epoch."""
    root = tmp_path_factory.mktemp("changes")
    run = root / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    args = [*common_args(write_images(root / "data", ("a", "b"), 32)), f"--output-dir={run}"]
    process = testing.popen(
        [sys.executable, str(ROOT / "train.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:  # printed as training starts: the stop comes after the step then under way
            if "SIGTERM or SIGHUP saves" in line:
                process.send_signal(signal.SIGTERM)
                break
        output = process.communicate(timeout=300)[0]
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert 0 < last_checkpoint(run)["global_step"] < STEPS_PER_EPOCH
    write_images(root / "other_classes", ("c", "d"), 2)
    write_images(root / "fewer_images", ("a", "b"), 30)
    return run


def last_checkpoint(run: Path) -> dict[str, Any]:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def files(folder: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_image_option_is_refused_honoured_or_free_on_resume() -> None:
    # an unlisted one would be refused by default, but each is placed on purpose
    task_groups = [*TASK.refused_on_resume, *TASK.honoured_on_resume, *TASK.free_on_resume]
    assert sorted(task_groups) == sorted(f.name for f in dataclasses.fields(ImageOptions))


@pytest.mark.parametrize(
    ("changed", "line"),
    [
        ("--image-size=32", "--image-size: the checkpoint was trained with 16, not 32;"),
        ("--ema", "--ema: the checkpoint was trained with False, not True;"),
        ("--data=synthetic", "--data: the checkpoint was trained with folder, not synthetic;"),
        ("--data-dir={root}/other_classes", "--data-dir: the checkpoint was trained with the classes a, b, not c, d;"),
        ("--data-dir={root}/fewer_images", "--data-dir: the checkpoint was trained with 64 training images, not 60;"),
    ],
)
def test_a_change_that_alters_what_the_checkpoint_means_is_refused_in_one_line_and_nothing_is_written(
    stopped: Path, changed: str, line: str
) -> None:
    before = files(stopped)
    result = run_train(
        *common_args(stopped.parent / "data"),
        f"--output-dir={stopped}",
        "--resume=last",
        changed.format(root=stopped.parent),
    )
    assert result.returncode == 2, result.stderr[-3000:]
    [error] = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert error.startswith(f"error: {line}") and "or start afresh in another --output-dir" in error, error
    assert "Traceback" not in result.stderr
    assert files(stopped) == before  # no config.yaml, checkpoint, log or lock written
