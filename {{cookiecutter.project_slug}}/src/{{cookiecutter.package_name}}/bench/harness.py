"""Training speed of one speed setting, through Lightning's Trainer or through a hand-written PyTorch loop.

The batches are on the device before the clock starts, so neither the loader nor the host-to-device copy is measured;
the device-side augmentation of ImageDataModule is, as it runs on the device in every training step. The device is
synchronized only at the edges of the timed windows, never in between.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.throughput import get_available_flops

from ..engine.config import Config
from ..engine.hardware import Hardware, apply_backend_flags, resolve
from ..engine.monitors import HALF
from ..engine.trainer import measuring_trainer
from ..tasks.image_classification.config import ImageOptions
from ..tasks.image_classification.data import ImageDataModule
from ..tasks.image_classification.module import ImageClassifier


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
    device: str  # "cuda" or "cpu"
    model: str
    image_size: int
    batch_size: int
    warmup: int  # untimed steps: compilation, cuDNN autotuning, allocator growth
    steps: int  # timed steps, cut into windows of `window` steps
    num_classes: int = 6  # the synthetic shapes

    @property
    def window(self) -> int:
        return max(1, self.steps // 5)

    def config(self, setting: Setting, output_dir: Path) -> tuple[Config, ImageOptions]:
        options = ImageOptions(model=self.model, image_size=self.image_size)
        return Config(
            accelerator=self.device,
            devices="1",
            strategy="auto",
            precision=setting.precision,
            tf32=setting.tf32,
            channels_last=setting.channels_last,
            compile=setting.compile,
            batch_size=self.batch_size,
            num_workers=None,  # the default, which only the folder runs use: DeviceBatches need no workers
            max_epochs=1,
            max_steps=self.warmup + self.steps,
            logger="tensorboard",
            output_dir=str(output_dir),
        ), options


@dataclass
class Timing:
    images_per_s: float  # median over the timed windows
    step_ms: float
    startup_s: float  # the warm-up steps' time beyond steady-state speed: compilation, autotuning
    peak_memory_gib: float | None  # None on CPU: no per-run peak to read, and RSS would include everything else
    windows: list[float]  # images/s of each timed window


class Clock:
    """Wall-clock time after step 0, after the warm-up, and at the end of every timed window."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.device = torch.device(spec.device)
        self.marks = {0, *range(spec.warmup, spec.warmup + spec.steps + 1, spec.window)}
        self.times: dict[int, float] = {}

    def tick(self, done: int) -> None:
        if done in self.marks:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.times[done] = time.perf_counter()

    def timing(self) -> Timing:
        marks = sorted(m for m in self.times if m >= self.spec.warmup)
        seconds = [self.times[b] - self.times[a] for a, b in itertools.pairwise(marks)]
        per_second = [self.spec.window * self.spec.batch_size / s for s in seconds]
        step_s = statistics.median(seconds) / self.spec.window
        peak = torch.cuda.max_memory_allocated(self.device) / 2**30 if self.device.type == "cuda" else None
        startup = self.times[self.spec.warmup] - self.times[0] - self.spec.warmup * step_s
        return Timing(statistics.median(per_second), 1000 * step_s, max(0.0, startup), peak, per_second)


class DeviceBatches:
    """`length` batches cycled from a few random uint8 batches that stay on the device."""

    def __init__(self, spec: Spec, length: int, distinct: int = 4) -> None:
        shape = (distinct, spec.batch_size, 3, spec.image_size, spec.image_size)
        self.images = torch.randint(0, 256, shape, dtype=torch.uint8, device=spec.device)
        self.labels = torch.randint(0, spec.num_classes, shape[:2], device=spec.device)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(self.length):
            yield self.images[i % len(self.images)], self.labels[i % len(self.labels)]


class DeviceData(ImageDataModule):
    """The product's DataModule, device-side augmentation included, with its loaders swapped for DeviceBatches."""

    batches: DeviceBatches

    def setup(self, stage: str) -> None:
        pass

    def train_dataloader(self) -> Any:
        return self.batches


class _ClockCallback(L.Callback):
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


def prepare(spec: Spec, setting: Setting, output_dir: Path) -> tuple[Config, ImageOptions, Hardware]:
    cfg, opts = spec.config(setting, output_dir)
    hw = resolve(cfg)
    apply_backend_flags(cfg)
    torch.compiler.reset()  # every setting compiles from scratch, not on top of the last one's guards
    if spec.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return cfg, opts, hw


def run_lightning(
    spec: Spec, setting: Setting, output_dir: Path, folder: Path | None = None, decode: str = "cpu"
) -> Timing:
    """The product: ImageClassifier in the Trainer of trainer.build_trainer, its per-step callbacks and logger
    included. Validation and checkpoints are left out: they happen once an epoch, not in the steps timed here.

    With `folder`, the batches come from the JPEGs there through the real loader (default worker count), decoded
    by `decode` ("cpu" or "gpu"): real-data speed, end to end. Without, from DeviceBatches: the training alone."""
    cfg, opts, hw = prepare(spec, setting, output_dir)
    data: ImageDataModule
    if folder is None:
        data = DeviceData(image_size=spec.image_size, batch_size=spec.batch_size, channels_last=hw.channels_last)
        data.batches = DeviceBatches(spec, spec.warmup + spec.steps)
    else:
        data = ImageDataModule(
            data="folder",
            data_dir=str(folder),
            image_size=spec.image_size,
            batch_size=spec.batch_size,
            num_workers=hw.num_workers,
            pin_memory=hw.pin_memory,
            channels_last=hw.channels_last,
            decode=decode,
        )
    model = ImageClassifier.from_config(cfg, opts, hw, [f"class{i}" for i in range(spec.num_classes)])
    clock = Clock(spec)
    trainer = measuring_trainer(cfg, hw, None, [_ClockCallback(clock)], enable_model_summary=False)
    trainer.fit(model, datamodule=data)
    return clock.timing()


def flops_per_batch(spec: Spec) -> int:
    """Forward and backward FLOPs of one batch, counted as the training run counts them (EngineModule)."""
    model = ImageClassifier(spec.model, [f"class{i}" for i in range(spec.num_classes)], spec.image_size)
    return model.count_flops(spec.batch_size)


def peak_flops(spec: Spec, setting: Setting, peak_tflops: float | None) -> float | None:
    """One device's dense peak for the setting's math: --peak-tflops for 16-bit settings, else Lightning's table."""
    if spec.device != "cuda":
        return None
    if peak_tflops is not None and setting.precision in HALF:
        return peak_tflops * 1e12
    torch.set_float32_matmul_precision("high" if setting.tf32 else "highest")  # the table reads it for fp32
    return get_available_flops(torch.device(spec.device), HALF.get(setting.precision, torch.float32))
