"""Throughput, MFU and the progress bar's loss, without making the CPU wait for the GPU after every step.

A training step only queues work on the GPU, so the CPU can prepare the next step while the GPU computes. Reading a
GPU value on the CPU (`.item()`, `float()`, `torch.cuda.synchronize()`) drains that queue, and the GPU then idles
while the CPU catches up: a few % of speed at ResNet-50 size, more with smaller models. Lightning's ThroughputMonitor
synchronizes after every step to time it, and a metric logged with `prog_bar=True` is read back after every step.
The two callbacks here read the GPU only on logging steps, which read it anyway to send metrics to the logger.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.throughput import Throughput
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar

from lightning_gpu_engine.config.cli import note
from lightning_gpu_engine.perf.networks import batch_flops
from lightning_gpu_engine.perf.peaks import device_peak

HALF = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


class LogStepThroughputMonitor(L.Callback):
    """Lightning's throughput meter timed on logging steps only: logs what ThroughputMonitor logs (train/time,
    train/device/samples_per_sec, train/device/mfu, ...), each rate over the steps since the previous logging step.
    MFU needs the FLOPs of a batch (networks.batch_flops) and a GPU in the table of peaks.py, named in a note at the
    start; where either is missing, no FLOPs or MFU are logged at all, rather than a 0.
    `length_fn`: items per batch (its tokens), as `batch_size_fn` counts samples per batch: train/items_per_sec."""

    def __init__(
        self, batch_size_fn: Callable[[Any], int], every_n_steps: int, length_fn: Callable[[Any], int] | None = None
    ) -> None:
        self.batch_size_fn, self.length_fn, self.every_n_steps = batch_size_fn, length_fn, every_n_steps
        self.meter: Throughput | None = None
        self.flops_per_batch = 0  # 0: not counted
        self.samples = self.items = self.batches = self.batches_at_log = self.logged_step = 0
        self.last_batch_end = 0.0
        self.started = self.paused = self.validation_started = 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        found = device_peak(trainer.strategy.root_device, str(trainer.precision))
        peak = found[0] if found else None
        batch_size = getattr(getattr(trainer, "datamodule", None), "hparams", {}).get("batch_size")
        self.flops_per_batch = 0 if getattr(trainer, "fast_dev_run", False) else batch_flops(pl_module, batch_size)
        counted = bool(self.flops_per_batch)
        if trainer.is_global_zero and counted:
            said = f"of {found[1]} (the engine's perf/peaks.py)" if found else "unknown for this device: no MFU logged"
            note(f"MFU: the peak {said}")
        # window_size=2: a rate between two consecutive logging steps
        self.meter = Throughput(available_flops=peak, world_size=trainer.world_size, window_size=2)
        self.started, self.paused, self.validation_started = time.perf_counter(), 0.0, 0.0
        self.logged_step = trainer.global_step

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        if self.validation_started:  # validation and the checkpoints saved after it are not training time
            self.paused += time.perf_counter() - self.validation_started
            self.validation_started = 0.0

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.samples += self.batch_size_fn(batch)
        self.items += self.length_fn(batch) if self.length_fn else 0
        self.batches += 1
        self.last_batch_end = time.perf_counter()  # timing a queued (unfinished) GPU step: only for average_rate
        step = trainer.global_step  # counts optimizer steps, so accumulated batches log once
        if self.meter is None or step == self.logged_step or step % self.every_n_steps:
            return
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()  # the clock is right only once the GPU has done what was queued
        flops = self.flops_per_batch * (self.batches - self.batches_at_log) if self.flops_per_batch else None
        elapsed = time.perf_counter() - self.started - self.paused
        lengths = self.items if self.length_fn else None
        self.meter.update(time=elapsed, batches=self.batches, samples=self.samples, lengths=lengths, flops=flops)
        self.logged_step, self.batches_at_log = step, self.batches
        pl_module.log_dict({f"train/{k}": float(v) for k, v in self.meter.compute().items()})

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.validation_started = time.perf_counter()

    def average_rate(self) -> float | None:
        """Samples per second per device over the whole run, validation left out: for runs too short to log a rate."""
        elapsed = self.last_batch_end - self.started - self.paused
        return self.samples / elapsed if self.samples and elapsed > 0 else None


class LogStepProgressBar(RichProgressBar):
    """Rich's progress bar, with train/loss as of the last logging step rather than read back after every step.

    It shows the train/loss that the LightningModule logs without `prog_bar=True`."""

    def __init__(self, every_n_steps: int) -> None:
        super().__init__()
        self.every_n_steps = every_n_steps
        self.loss: float | None = None

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        latest = trainer.logged_metrics.get("train/loss")
        if trainer.training and latest is not None and trainer.global_step % self.every_n_steps == 0:
            self.loss = float(latest)
        return metrics if self.loss is None else {**metrics, "train/loss": self.loss}


class PlainProgress(ProgressBar):
    """Progress as plain lines, for a stdout that is a file (SLURM's .out, a CI log): Rich redraws a bar there only
    at epoch end. A line on logging steps, at most one per `min_seconds` after each epoch's first, and one per epoch:
    "done" only for an epoch whose batches all ran, with the val/ values only of a validation that ran in it.
    The loss is read on logging steps only, when logging reads the GPU anyway."""

    def __init__(self, every_n_steps: int, min_seconds: float = 30.0) -> None:
        super().__init__()
        self.every_n_steps, self.min_seconds = every_n_steps, min_seconds
        self.enabled = True
        self.last_line = self.epoch_started = 0.0
        self.first_batch: int | None = None  # of this process in this epoch: a resumed epoch starts mid-way
        self.last_batch: int | None = None  # None: no batch ran in this run's part of the epoch
        self.validated = False  # whether a validation ended in this epoch: else the val/ values are an earlier one's

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def _print(self, trainer: L.Trainer, text: str) -> None:
        if self.enabled and trainer.is_global_zero:
            print(text, flush=True)
            self.last_line = time.monotonic()

    def _epoch(self, trainer: L.Trainer) -> str:
        of = f"/{trainer.max_epochs}" if trainer.max_epochs not in (None, -1) else ""
        return f"epoch {trainer.current_epoch + 1}{of}"

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.on_train_epoch_start(trainer, pl_module)  # Lightning skips the epoch start when resuming mid-epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.epoch_started, self.last_line, self.first_batch = time.monotonic(), 0.0, None
        self.last_batch, self.validated = None, False

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.validated = self.validated or not trainer.sanity_checking

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        self.first_batch = batch_idx if self.first_batch is None else self.first_batch
        self.last_batch = batch_idx
        if step % self.every_n_steps or (self.last_line and time.monotonic() - self.last_line < self.min_seconds):
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        rate = (batch_idx + 1 - self.first_batch) / max(time.monotonic() - self.epoch_started, 1e-9)
        shown = f"  train/loss={float(loss):.4f}" if isinstance(loss, torch.Tensor) else ""
        total = self.total_train_batches
        batches = f"{batch_idx + 1}/{total}" if isinstance(total, int) else str(batch_idx + 1)
        self._print(trainer, f"{self._epoch(trainer)}  batch {batches}  step {step}{shown}  {rate:.1f} batches/s")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = epoch_metrics(trainer.callback_metrics)
        shown = "  ".join(f"{k}={v:.4f}" for k, v in metrics.items() if self.validated or not k.startswith("val/"))
        took = time.monotonic() - self.epoch_started
        total, step = self.total_train_batches, trainer.global_step
        if self.last_batch is None or not isinstance(total, int) or self.last_batch + 1 >= total:
            self._print(trainer, f"{self._epoch(trainer)} done in {took:.0f} s, step {step}: {shown}")
            return
        # cut short: by the step budget, or by a stop (a signal's save, a sweep's pruning)
        by = f" by --max-steps={trainer.max_steps}" if 0 <= trainer.max_steps <= step else ""  # -1: no budget
        stopped = f"stopped at batch {self.last_batch + 1}/{total}{by}"
        self._print(trainer, f"{self._epoch(trainer)} {stopped} in {took:.0f} s, step {step}: {shown}")


def epoch_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The task's own train/ and val/ scalars (train/loss, val/acc, ...), loss first: the throughput meter's are not."""
    counters = ("time", "batches", "samples", "lengths")
    own = {
        k: float(v)
        for k, v in metrics.items()
        if k.count("/") == 1 and k.startswith(("train/", "val/")) and not k.endswith(("_per_sec", *counters))
    }
    return dict(sorted(own.items(), key=lambda kv: (kv[0].startswith("val/"), not kv[0].endswith("/loss"), kv[0])))


class ValidationRecord(L.Callback):
    """Appends each validation's monitored metric to a JSON-lines file (<output-dir>/validation.jsonl), whatever the
    logger: a plain record of the run, and what sweep.py reads to prune a trial while it runs. `validation` counts
    them from 1: the epoch's number, or with `every_steps` (--val-every) the step's multiple of it, so a resumed run's
    count goes on and trials of a sweep compare at the same amount of training even when their batch sizes differ."""

    def __init__(self, path: Path, monitor: str, every_steps: int | None) -> None:
        self.path, self.monitor, self.every_steps = path, monitor, every_steps

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if trainer.sanity_checking or not trainer.is_global_zero or value is None:
            return
        step = trainer.global_step
        number = step // self.every_steps if self.every_steps else trainer.current_epoch + 1
        record = {"validation": number, "epoch": trainer.current_epoch, "step": step, self.monitor: float(value)}
        with open(self.path, "a") as file:
            file.write(json.dumps(record) + "\n")
