"""Between logging steps, training never reads a tensor's value on the CPU: on a GPU each read waits for the GPU."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning as L
import pytest
import torch

from lightning_gpu_engine import train
from lightning_gpu_engine.testing import warm_starts
from lightning_gpu_engine.testing.processes import wait_until
from lightning_gpu_engine.trainer import trainer as trainer_module

from .conftest import run_toy


class CountReads(L.Callback):
    """How many tensor reads each training step made, from one step's start to the next one's."""

    def __init__(self) -> None:
        self.active = False
        self.reads = 0
        self.per_step: list[int] = []

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        if self.active:
            self.per_step.append(self.reads)
        self.active, self.reads = True, 0

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.active = False


class FusedAdamW(torch.optim.AdamW):
    """The single-kernel AdamW that CUDA runs: the CPU's default AdamW reads its step counters every step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "fused": True})


def test_tensors_are_read_only_on_logging_steps_and_throughput_is_logged_there(
    toy: ModuleType, tiny_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = CountReads()
    build_callbacks = trainer_module.build_callbacks
    monkeypatch.setattr(
        trainer_module, "build_callbacks", lambda *args, **kwargs: [counter, *build_callbacks(*args, **kwargs)]
    )
    monkeypatch.setattr(torch.optim, "AdamW", FusedAdamW)
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, _counted(getattr(torch.Tensor, name), counter))
    # and what waits for a GPU without a read in Python: counting by value, copying from Python numbers
    monkeypatch.setattr(torch, "bincount", _counted(torch.bincount, counter))
    monkeypatch.setattr(torch, "unique", _counted(torch.unique, counter))
    monkeypatch.setattr(torch, "tensor", _counted(torch.tensor, counter, lambda kwargs: "device" in kwargs))

    train(toy.TASK, [*tiny_args, "--samples=96", "--log-every-n-steps=4"])  # 12 steps

    assert [step for step, reads in enumerate(counter.per_step, start=1) if reads] == [4, 8]
    with open(tmp_path / "run" / "logs" / "version_0" / "metrics.csv") as fh:
        logged = [row for row in csv.DictReader(fh) if row.get("train/device/samples_per_sec")]
    # The first logging step starts the clock; each later one logs the speed since the one before.
    assert [int(row["step"]) + 1 for row in logged] == [8, 12]
    assert all(float(row["train/device/samples_per_sec"]) > 0 for row in logged)
    assert [float(row["train/samples"]) for row in logged] == [64, 96]


def _counted(
    function: Callable[..., Any], counter: CountReads, when: Callable[[dict[str, Any]], bool] = lambda kwargs: True
) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        counter.reads += when(kwargs)
        return function(*args, **kwargs)

    return counted


def test_after_a_mid_epoch_resume_the_epoch_line_times_this_run_not_the_machine(
    my_task: Path, tiny_args: list[str], tmp_path: Path
) -> None:
    """Lightning calls no epoch-start hook when it resumes mid-epoch: the line once said "done in 913 s" (the time
    since boot) after a run of 26 s."""
    args = [*tiny_args, "--samples=4000", "--checkpoint-every=1steps"]  # 500 steps: killed well before the end
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    env = dict(os.environ)
    with warm_starts.popen(
        [sys.executable, str(my_task), *args],
        cwd=my_task.parent,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as first:
        saved = lambda: last.exists() and torch.load(last, weights_only=True)["global_step"] >= 3  # noqa: E731
        wait_until(saved, first, "a checkpoint of step 3")
        os.killpg(first.pid, signal.SIGKILL)  # mid-epoch
    started = time.monotonic()
    resumed = run_toy(my_task, *args, "--resume=last")
    took = time.monotonic() - started
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [done] = re.findall(r"epoch 1/1 done in (\d+) s, step 500", resumed.stdout)
    assert int(done) <= took, f"the epoch line says {done} s; the whole resumed run took {took:.0f} s"


class TokenModel(L.LightningModule):
    """Sequences of 12 tokens of 4 features each: a batch counts its sequences as samples and its tokens as items."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> Any:
        data = torch.utils.data.TensorDataset(torch.randn(64, 12, 4))
        return torch.utils.data.DataLoader(data, batch_size=8)


def test_a_batchs_items_are_logged_as_items_per_second_and_flops_not_counted_are_not_logged(tmp_path: Path) -> None:
    """length_fn counts a batch's items, as batch_size_fn its samples. A module whose FLOPs are not counted (no
    example_input) gets no flops_per_sec at all: a 0.0 there would read as a measurement."""
    from lightning_gpu_engine.perf.monitors import (
        LogStepThroughputMonitor,
    )

    monitor = LogStepThroughputMonitor(
        lambda b: b[0].size(0), every_n_steps=2, length_fn=lambda b: b[0][:, :, 0].numel()
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=8,
        callbacks=[monitor],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(TokenModel())
    logged = {k: float(v) for k, v in trainer.logged_metrics.items()}
    assert logged["train/samples"] == 64 and logged["train/lengths"] == 64 * 12
    per_device = logged["train/device/items_per_sec"] / logged["train/device/samples_per_sec"]
    assert per_device == pytest.approx(12, rel=1e-6)
    assert not [key for key in logged if "flops" in key or "mfu" in key], logged


def test_a_log_file_gets_the_hardware_first_plain_progress_lines_and_epoch_summaries(
    my_task: Path, tiny_args: list[str]
) -> None:
    """What a SLURM .out file or a CI log shows: stdout is a pipe here, as there."""
    result = run_toy(my_task, *tiny_args, "--max-epochs=2")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("hardware: cpu x1 | precision=32-true")  # before Lightning's banners
    assert "litlogger" not in result.stdout + result.stderr and "💡" not in result.stdout + result.stderr
    for epoch in (1, 2):  # a line once the first step is done, whatever the pace, and one when the epoch ends
        assert any(line.startswith(f"epoch {epoch}/2  batch 1/4  step {4 * epoch - 3}  train/loss=") for line in lines)
        summary = next(line for line in lines if line.startswith(f"epoch {epoch}/2 done in "))
        assert f"step {4 * epoch}: train/loss=" in summary and " val/loss=" in summary
    final = lines[-1]
    assert final.startswith("best val/loss=") and "nan" not in final and "n/a" not in final
    assert "\r" not in result.stdout  # no progress bar redrawn over itself in the file
