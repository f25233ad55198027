"""`--resume` with options other than the checkpoint's: each change is refused in one line, or honoured and said.

One first run of the toy task, stopped by Ctrl-C mid-epoch, is shared by every test; each resume works on its own copy
of it. The image task's own options are tests/image_classification/test_resume_changes.py's.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import shutil
import signal
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning as L
import pytest
import torch
import yaml

from lightning_gpu_engine import train
from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.reliability.resume_changes import (
    FREE,
    GLOBAL_BATCH,
    HONOURED,
    OWN_CHECK,
    REFUSED,
)

from .conftest import TOY, run_toy

# 64 training samples in batches of 4, two per step: 16 batches and 8 optimizer steps an epoch
STEPS_PER_EPOCH = 8
ARGS = [*TOY, "--samples=64", "--batch-size=4", "--accumulate-grad-batches=2", "--max-epochs=2"]


@pytest.fixture(scope="module")
def stopped(toy: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run stopped by Ctrl-C during its second step: a checkpoint in the middle of an epoch."""
    run = tmp_path_factory.mktemp("changes") / "run"

    def ctrl_c_in_step_2(self: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if self.global_step == 1:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(toy.Regressor, "on_train_batch_start", ctrl_c_in_step_2)
        with pytest.raises(SystemExit) as stop:
            train(toy.TASK, [*ARGS, f"--output-dir={run}"])
    assert stop.value.code == 128 + signal.SIGINT
    assert 0 < last_checkpoint(run)["global_step"] < STEPS_PER_EPOCH
    return run


def last_checkpoint(run: Path) -> dict[str, Any]:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def resume(my_task: Path, stopped: Path, copy: Path, *changed: str) -> subprocess.CompletedProcess[str]:
    shutil.copytree(stopped, copy)
    return run_toy(my_task, *ARGS, f"--output-dir={copy}", "--resume=last", *changed)


def files(folder: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_option_is_refused_honoured_or_free_on_resume() -> None:
    groups = [*REFUSED, *HONOURED, *GLOBAL_BATCH, *OWN_CHECK, *FREE]
    assert sorted(groups) == sorted(f.name for f in dataclasses.fields(Config))  # each once, none left out


@pytest.mark.parametrize(
    ("changed", "line"),
    [
        ("--seed=7", "--seed: the checkpoint was trained with 42, not 7;"),
        ("--batch-size=8", "--batch-size: the checkpoint was trained with a global batch of 8 "),
        # a task's own options are refused unless it lists them as honoured or free
        ("--hidden=32", "--hidden: the checkpoint was trained with 64, not 32;"),
    ],
)
def test_a_change_that_alters_what_the_checkpoint_means_is_refused_in_one_line_and_nothing_is_written(
    my_task: Path, stopped: Path, changed: str, line: str
) -> None:
    before = files(stopped)
    result = run_toy(my_task, *ARGS, f"--output-dir={stopped}", "--resume=last", changed)
    assert result.returncode == 2, result.stderr[-3000:]
    [error] = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert error.startswith(f"error: {line}") and "or start afresh in another --output-dir" in error, error
    assert "Traceback" not in result.stderr
    assert files(stopped) == before  # no config.yaml, checkpoint, log or lock written


def test_a_new_lr_weight_decay_and_betas_are_used_and_recorded_and_auto_batch_size_keeps_the_checkpoints(
    my_task: Path, stopped: Path, tmp_path: Path
) -> None:
    """The restored optimizer and scheduler would otherwise bring back the old rate, decay and betas."""
    old = last_checkpoint(stopped)["hyper_parameters"]
    assert (old["lr"], old["weight_decay"], old["betas"]) != (0.5, 0.2, [0.5, 0.6])
    run = tmp_path / "run"
    result = resume(my_task, stopped, run, "--lr=0.5", "--weight-decay=0.2", "--betas=0.5,0.6", "--auto-batch-size")
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line.split(":")[1] for line in result.stdout.splitlines() if line.startswith("resume: ")]
    assert said == [
        " --auto-batch-size is not searched again",
        f" --lr 0.5 instead of the checkpoint's {old['lr']}",
        f" --weight-decay 0.2 instead of the checkpoint's {old['weight_decay']}",
        " --betas 0.5,0.6 instead of the checkpoint's 0.9,0.999",
    ], said
    saved = last_checkpoint(run)
    assert saved["global_step"] == 2 * STEPS_PER_EPOCH
    [scheduler], [optimizer] = saved["lr_schedulers"], saved["optimizer_states"]
    assert scheduler["base_lrs"] == [0.5] * len(optimizer["param_groups"])
    assert {group["initial_lr"] for group in optimizer["param_groups"]} == {0.5}
    assert sorted({group["weight_decay"] for group in optimizer["param_groups"]}) == [0.0, 0.2]  # norms and biases: 0
    assert {group["betas"] for group in optimizer["param_groups"]} == {(0.5, 0.6)}
    # the rate used at each step: the schedule at the new peak, not the old one
    resumed_at = last_checkpoint(stopped)["global_step"]  # the resumed run logs on in the stopped run's file
    logged = [float(value) for step, value in metric_column(run, "lr-AdamW/pg1") if step >= resumed_at]
    assert logged and max(logged) <= 0.5 and logged[0] > 0.4, logged
    config = yaml.safe_load((run / "config.yaml").read_text())
    recorded = (config["lr"], config["weight_decay"], config["betas"], config["batch_size"], config["auto_batch_size"])
    assert recorded == (0.5, 0.2, "0.5,0.6", 4, False)
    assert (saved["hyper_parameters"]["lr"], saved["datamodule_hyper_parameters"]["batch_size"]) == (0.5, 4)


def test_the_same_global_batch_split_anew_trains_each_sample_once_from_where_the_checkpoint_stopped(
    my_task: Path, stopped: Path, tmp_path: Path
) -> None:
    """4 samples x 2 accumulated became 8 x 1: the place in the epoch, counted in batches of 4, is moved to batches of
    8. Counted in the wrong size, samples would be skipped, and the epochs would end steps early."""
    run = tmp_path / "run"
    result = resume(my_task, stopped, run, "--batch-size=8", "--accumulate-grad-batches=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resume: 8 per device x 1 devices x 1 accumulated instead of the checkpoint's 4 per device" in result.stdout
    saved = last_checkpoint(run)
    assert saved["global_step"] == 2 * STEPS_PER_EPOCH  # 64 samples an epoch, 8 a step: none skipped or repeated
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert (config["batch_size"], config["accumulate_grad_batches"]) == (8, 1)


def metric_column(run: Path, name: str) -> list[tuple[int, str]]:
    """(step, value) of each row that logged `name`."""
    [metrics] = (run / "logs").glob("*/metrics.csv")
    header, *rows = (line.split(",") for line in metrics.read_text().splitlines())
    return [(int(row[header.index("step")]), row[header.index(name)]) for row in rows if row[header.index(name)]]


@pytest.mark.parametrize(
    ("epochs", "ranks"),
    [
        pytest.param(1, 1, id="one-epoch"),
        pytest.param(2, 1, id="two-epochs"),
        pytest.param(1, 2, id="one-epoch-2-ddp-ranks", marks=pytest.mark.multiprocess),
    ],
)
def test_a_run_that_reached_max_steps_inside_an_epoch_goes_on_with_that_epoch_under_a_larger_max_steps(
    epochs: int, ranks: int, my_task: Path, tmp_path: Path
) -> None:
    """Lightning ends the epoch at --max-steps; resumed, it would start the next one (or, with --max-epochs 1, train
    nothing) without the batches this epoch had left."""
    out = tmp_path / "run"
    layout = ["--devices=2", "--strategy=ddp"] if ranks == 2 else []
    # 8 steps an epoch on any number of ranks
    args = [*TOY, f"--samples={64 * ranks}", f"--max-epochs={epochs}", *layout, f"--output-dir={out}"]
    first = run_toy(my_task, *args, "--max-steps=3")
    assert first.returncode == 0, first.stderr[-3000:]
    extended = run_toy(my_task, *args, "--max-steps=6", "--resume=last")
    assert extended.returncode == 0, extended.stderr[-3000:]
    last = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)
    assert (last["global_step"], last["epoch"]) == (6, 0)
    assert last["exact_resume"]["train_loader"]["batches_done"] == 6
    with open(out / "logs" / "version_0" / "metrics.csv", newline="") as file:
        steps = [row["step"] for row in csv.DictReader(file) if row.get("train/loss")]
    assert steps == [str(s) for s in range(6)], "each step logged once, at its own step"
