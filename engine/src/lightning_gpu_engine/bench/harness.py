"""Timing of training (or inference) steps, for any task: the settings compared, the clock, the peak FLOPs.

The device is synchronized only at the edges of the timed windows, never in between. A task's bench module builds
the runs: its model and data through `time_fit`, and a hand-written loop of its own timed by the same `Clock`.
"""

from __future__ import annotations

import itertools
import logging
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.warnings import PossibleUserWarning

from lightning_gpu_engine import (
    HALF_PRECISIONS,
    Config,
    Hardware,
    Task,
    apply_backend_flags,
    fsdp_units,
    measuring_trainer,
    resolve_hardware,
)
from lightning_gpu_engine import peak_flops as datasheet_peak

from .report import compare


@dataclass(frozen=True)
class Setting:
    precision: str  # as Lightning's Trainer takes it
    tf32: bool
    channels_last: bool
    compile: bool

    @property
    def name(self) -> str:
        base = {"bf16-mixed": "bf16", "16-mixed": "fp16"}.get(self.precision, "tf32" if self.tf32 else "fp32")
        return base + "+cl" * self.channels_last + "+compile" * self.compile


@dataclass(frozen=True)
class Spec:
    """What every timed run shares; a task's spec adds its model and input sizes."""

    device: str  # "cuda" or "cpu"
    batch_size: int
    warmup: int  # untimed steps: compilation, cuDNN autotuning, allocator growth
    steps: int  # timed steps, cut into windows of `window` steps

    @property
    def window(self) -> int:
        return max(1, self.steps // 5)


@dataclass
class Timing:
    samples_per_s: float  # median over the timed windows (images, sequences, rows: whatever a batch holds)
    step_ms: float
    startup_s: float  # the warm-up steps' time beyond steady-state speed: compilation, autotuning
    peak_memory_gib: float | None  # None on CPU: no per-run peak to read, and RSS would include everything else
    windows: list[float]  # samples/s of each timed window
    # Process CPU seconds per step (median window): time spent waiting for the cores that other programs hold does not
    # count, so on a shared CPU its ratios stay where wall-clock ratios scatter. With CUDA: the host's launch work only
    cpu_step_ms: float


class Clock:
    """Wall-clock and process CPU time after step 0, after the warm-up, and at the end of every timed window."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.device = torch.device(spec.device)
        self.marks = {0, *range(spec.warmup, spec.warmup + spec.steps + 1, spec.window)}
        self.times: dict[int, float] = {}
        self.cpu_times: dict[int, float] = {}

    def tick(self, done: int) -> None:
        if done in self.marks:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.times[done] = time.perf_counter()
            self.cpu_times[done] = time.process_time()

    def timing(self) -> Timing:
        marks = sorted(m for m in self.times if m >= self.spec.warmup)
        seconds = [self.times[b] - self.times[a] for a, b in itertools.pairwise(marks)]
        per_second = [self.spec.window * self.spec.batch_size / s for s in seconds]
        step_s = statistics.median(seconds) / self.spec.window
        peak = torch.cuda.max_memory_allocated(self.device) / 2**30 if self.device.type == "cuda" else None
        startup = self.times[self.spec.warmup] - self.times[0] - self.spec.warmup * step_s
        cpu = [self.cpu_times[b] - self.cpu_times[a] for a, b in itertools.pairwise(marks)]
        cpu_step_ms = 1000 * statistics.median(cpu) / self.spec.window
        return Timing(statistics.median(per_second), 1000 * step_s, max(0.0, startup), peak, per_second, cpu_step_ms)


class ClockCallback(L.Callback):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == 0:
            self.clock.tick(0)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.clock.tick(batch_idx + 1)


@contextmanager
def quiet_trainers() -> Iterator[None]:
    """One table, not one Trainer banner and one small-dataset warning per timed run."""
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=PossibleUserWarning)
            yield
    finally:
        lightning_log.setLevel(level)


def prepare(cfg: Config, fsdp2: bool = False, channels_last: bool = True, compile_off: str | None = None) -> Hardware:
    """The hardware of one timed run, its backend flags set, nothing left over from the run before. `fsdp2`,
    `channels_last`, `compile_off`: the task's FSDP flavour, whether it declares a layout, and why it is never
    compiled (Task.fsdp2, Task.channels_last, Task.compile_off)."""
    hw = resolve_hardware(cfg, fsdp2=fsdp2, channels_last=channels_last, compile_off=compile_off)
    apply_backend_flags(cfg)
    torch.compiler.reset()  # every setting compiles from scratch, not on top of the last one's guards
    if hw.accelerator == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return hw


def time_fit(
    spec: Spec,
    cfg: Config,
    hw: Hardware,
    model: L.LightningModule,
    data: L.LightningDataModule,
    task: Task | None = None,
) -> Timing:
    """The product: the task's module in the Trainer of trainer.build_trainer, its per-step callbacks and logger
    included. Validation and checkpoints are left out: they happen once an epoch, not in the steps timed here.
    `task`: its counts for the throughput monitor, and under --strategy fsdp its blocks and FSDP flavour."""
    clock = Clock(spec)
    wrap = fsdp_units(task, model) if task and cfg.strategy == "fsdp" else None
    trainer = measuring_trainer(cfg, hw, wrap, [ClockCallback(clock)], task, enable_model_summary=False)
    trainer.fit(model, datamodule=data)
    return clock.timing()


def peak_flops(device: str, precision: str, tf32: bool, peak_tflops: float | None) -> float | None:
    """One device's dense peak for a timed run's math: --peak-tflops for 16-bit precisions, else perf/peaks.py's."""
    if device != "cuda":
        return None
    if peak_tflops is not None and precision in HALF_PRECISIONS:
        return peak_tflops * 1e12
    found = datasheet_peak(torch.cuda.get_device_name(), precision, tf32)
    return found[0] if found else None


def interleaved_rounds(
    results: dict[str, Any],
    first: tuple[float, float],
    rounds: int,
    runs: tuple[Callable[..., Timing], Callable[..., Timing]],
    spec: Spec,
    setting: Any,
    workdir: Path,
    save: Callable[[], None],
) -> None:
    """Lightning against plain PyTorch: `first` (the rates of the two rows just measured), then `rounds` - 1 more
    pairs from `runs` (Lightning's, plain), in turn, so that a machine whose speed drifts slows both sides alike. The
    ratio goes into `results` and is saved after each pair."""
    run_lightning, run_plain = runs
    measured = [first]
    results |= compare(measured)
    save()
    for i in range(1, rounds):
        lightning = run_lightning(spec, setting, workdir / f"round{i}-lightning").samples_per_s
        measured.append((lightning, run_plain(spec, setting, workdir / f"round{i}-plain").samples_per_s))
        results |= compare(measured)
        save()
