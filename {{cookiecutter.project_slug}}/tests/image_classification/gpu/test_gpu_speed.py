"""A smoke check, not a benchmark: with the GPU knobs on (checked in effect), a ResNet trains in less memory; the
speed-up is printed.

Speed is never asserted (a shared or throttled GPU would make the test flaky); bench.py measures it side by side.
That each knob works is what the other tests check.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import lightning as L
import pytest
import torch

from .probes import NEEDS_GPU, fit, network


class StepTimer(L.Callback):
    """Seconds per training step and peak memory of the run, once `warmup` steps have compiled and autotuned."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.memory_before_run = torch.cuda.memory_allocated()  # what earlier tests left behind is not this run's

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.knobs = (trainer.precision, getattr(network(pl_module), "_compiled_call_impl", None) is not None)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if trainer.global_step == self.warmup:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = time.perf_counter()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        torch.cuda.synchronize()
        self.step_seconds = (time.perf_counter() - self.start) / (trainer.global_step - self.warmup)
        self.peak_bytes = torch.cuda.max_memory_allocated() - self.memory_before_run


def train_resnet50(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> StepTimer:
    timer = StepTimer(warmup=5)
    torch._dynamo.reset()  # compile afresh, within the warm-up, whatever earlier tests left in dynamo's cache
    fit(monkeypatch, args, timer, limit_val_batches=0, limit_test_batches=0)
    gc.collect()
    torch.cuda.empty_cache()
    return timer


@pytest.mark.gpu
@NEEDS_GPU
def test_default_gpu_settings_train_a_resnet_in_less_memory_than_fp32_eager_nchw(
    tiny_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    resnet = [*tiny_args, "--accelerator=cuda", "--model=resnet50", "--image-size=224", "--batch-size=64"]
    resnet += ["--train-samples=1600", "--num-workers=auto"]  # 25 steps: 5 to warm up, 20 timed
    fp32_eager_nchw = ["--precision=32-true", "--no-tf32", "--no-compile", "--no-channels-last"]  # TF32 is a knob too
    fp32 = train_resnet50(monkeypatch, [*resnet, *fp32_eager_nchw])
    fast = train_resnet50(monkeypatch, [*resnet, "--precision=bf16-mixed", "--tf32", "--compile", "--channels-last"])
    speedup = fp32.step_seconds / fast.step_seconds
    report = f"fp32 {fp32.step_seconds * 1e3:.1f} ms/step, {fp32.peak_bytes / 2**30:.2f} GiB; "
    report += f"defaults {fast.step_seconds * 1e3:.1f} ms/step, {fast.peak_bytes / 2**30:.2f} GiB; {speedup:.2f}x"
    print(report)  # -s shows it; scripts/gpu_evidence.sh keeps it in pytest's report
    assert (fp32.knobs, fast.knobs) == (("32-true", False), ("bf16-mixed", True)), "the two runs differ as named"
    assert fast.peak_bytes < fp32.peak_bytes, report
