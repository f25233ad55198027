"""`--resume` with options other than the checkpoint's: each change is refused in one line, or honoured and said.

One first run, stopped by SIGTERM mid-epoch, is shared by every test; each resume works on its own copy of it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from conftest import ROOT, run_train
from PIL import Image

from {{ cookiecutter.package_name }}.engine.config import Config
from {{ cookiecutter.package_name }}.engine.resume_changes import FREE, GLOBAL_BATCH, HONOURED, OWN_CHECK, REFUSED
from {{ cookiecutter.package_name }}.tasks.image_classification import TASK
from {{ cookiecutter.package_name }}.tasks.image_classification.config import ImageOptions

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
    process = subprocess.Popen(
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


def resume(stopped: Path, copy: Path, *changed: str) -> subprocess.CompletedProcess[str]:
    shutil.copytree(stopped, copy)
    return run_train(*common_args(stopped.parent / "data"), f"--output-dir={copy}", "--resume=last", *changed)


def files(folder: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_option_is_refused_honoured_or_free_on_resume() -> None:
    groups = [*REFUSED, *HONOURED, *GLOBAL_BATCH, *OWN_CHECK, *FREE]
    assert sorted(groups) == sorted(f.name for f in dataclasses.fields(Config))  # each once, none left out
    # the image task's own: an unlisted one would be refused by default, but each is placed on purpose
    task_groups = [*TASK.refused_on_resume, *TASK.honoured_on_resume, *TASK.free_on_resume]
    assert sorted(task_groups) == sorted(f.name for f in dataclasses.fields(ImageOptions))


@pytest.mark.parametrize(
    ("changed", "line"),
    [
        ("--image-size=32", "--image-size: the checkpoint was trained with 16, not 32;"),
        ("--seed=7", "--seed: the checkpoint was trained with 42, not 7;"),
        ("--ema", "--ema: the checkpoint was trained with False, not True;"),
        ("--data=synthetic", "--data: the checkpoint was trained with folder, not synthetic;"),
        ("--data-dir={root}/other_classes", "--data-dir: the checkpoint was trained with the classes a, b, not c, d;"),
        ("--data-dir={root}/fewer_images", "--data-dir: the checkpoint was trained with 64 training images, not 60;"),
        ("--batch-size=8", "--batch-size: the checkpoint was trained with a global batch of 8 "),
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


def test_a_new_lr_and_weight_decay_are_used_and_recorded_and_auto_batch_size_keeps_the_checkpoints(
    stopped: Path, tmp_path: Path
) -> None:
    """The restored optimizer and scheduler would otherwise bring back the old rate and decay."""
    run = tmp_path / "run"
    result = resume(stopped, run, "--lr=0.5", "--weight-decay=0.2", "--auto-batch-size")
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line.split(":")[1] for line in result.stdout.splitlines() if line.startswith("resume: ")]
    assert said == [
        " --auto-batch-size is not searched again",
        " --lr 0.5 instead of the checkpoint's 0.002",
        " --weight-decay 0.2 instead of the checkpoint's 0.05",
    ], said
    saved = last_checkpoint(run)
    assert saved["global_step"] == 2 * STEPS_PER_EPOCH
    [scheduler], [optimizer] = saved["lr_schedulers"], saved["optimizer_states"]
    assert scheduler["base_lrs"] == [0.5] * len(optimizer["param_groups"])
    assert {group["initial_lr"] for group in optimizer["param_groups"]} == {0.5}
    assert sorted({group["weight_decay"] for group in optimizer["param_groups"]}) == [0.0, 0.2]  # norms and biases: 0
    # the rate used at each step: the schedule at the new peak (the old peak was 0.002)
    logged = [float(value) for value in metric_column(run, "lr-AdamW/pg1")]
    assert logged and max(logged) <= 0.5 and logged[0] > 0.4, logged
    config = yaml.safe_load((run / "config.yaml").read_text())
    recorded = (config["lr"], config["weight_decay"], config["batch_size"], config["auto_batch_size"])
    assert recorded == (0.5, 0.2, 4, False)
    assert (saved["hyper_parameters"]["lr"], saved["datamodule_hyper_parameters"]["batch_size"]) == (0.5, 4)


def test_the_same_global_batch_split_anew_trains_each_image_once_from_where_the_checkpoint_stopped(
    stopped: Path, tmp_path: Path
) -> None:
    """4 images x 2 accumulated became 8 x 1: the place in the epoch, counted in batches of 4, is moved to batches of
    8. Counted in the wrong size, images would be skipped, and the epochs would end steps early."""
    run = tmp_path / "run"
    result = resume(stopped, run, "--batch-size=8", "--accumulate-grad-batches=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resume: 8 per device x 1 devices x 1 accumulated instead of the checkpoint's 4 per device" in result.stdout
    saved = last_checkpoint(run)
    assert saved["global_step"] == 2 * STEPS_PER_EPOCH  # 64 images an epoch, 8 a step: none skipped or repeated
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert (config["batch_size"], config["accumulate_grad_batches"]) == (8, 1)


def metric_column(run: Path, name: str) -> list[str]:
    [metrics] = (run / "logs").glob("*/metrics.csv")
    header, *rows = (line.split(",") for line in metrics.read_text().splitlines())
    return [row[header.index(name)] for row in rows if row[header.index(name)]]
