"""`train.py --profile`: a few training steps after the warm-up, recorded by torch.profiler.

Writes <output-dir>/profile/trace.json (open it in https://ui.perfetto.dev or chrome://tracing) and
<output-dir>/profile/kernels.txt (the operators and kernels that took the most time, most expensive first).

Layer 7: imports `config`, `perf`, `task` and `trainer`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.profiler import ProfilerActivity

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.perf.hardware import Hardware
from lightning_gpu_engine.task import Task
from lightning_gpu_engine.trainer.trainer import measuring_trainer

SKIP, WARMUP, ACTIVE = 5, 2, 5  # steps left out (compilation, cuDNN autotuning), profiler warm-up, steps recorded


class ProfileSteps(L.Callback):
    def __init__(self, out: Path) -> None:
        self.out = out
        self.cuda = False
        self.profiler: torch.profiler.profile | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:  # one trace is enough; every rank writing the same file is not
            return
        self.cuda = trainer.strategy.root_device.type == "cuda"
        if not self.cuda:  # a CUDA build of torch without a GPU: Kineto would print "ERROR: gpuGetDeviceCount failed"
            os.environ.setdefault("KINETO_LOG_LEVEL", "5")
        self.profiler = torch.profiler.profile(
            activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if self.cuda else [])],
            schedule=torch.profiler.schedule(wait=SKIP, warmup=WARMUP, active=ACTIVE, repeat=1),
            record_shapes=True,
            on_trace_ready=self._write,
        )
        self.profiler.start()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.profiler is not None:
            self.profiler.step()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.profiler is not None:
            self.profiler.stop()

    def _write(self, profiler: torch.profiler.profile) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(self.out / "trace.json"))
        # Self time: what an operator or kernel spends itself, not in what it calls, so nothing is counted twice.
        sort_by = "self_device_time_total" if self.cuda else "self_cpu_time_total"
        table = profiler.key_averages().table(sort_by=sort_by, row_limit=30)
        (self.out / "kernels.txt").write_text(f"{ACTIVE} training steps, sorted by {sort_by}\n{table}\n")


def profile(
    cfg: Config,
    hw: Hardware,
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    wrap: set[type[nn.Module]] | None = None,
    task: Task | None = None,
) -> dict[str, float]:
    """Train SKIP + WARMUP + ACTIVE steps with the usual callbacks, minus validation and checkpoints. `task`: its
    throughput counts and its FSDP flavour."""
    out = Path(cfg.output_dir) / "profile"
    steps = SKIP + WARMUP + ACTIVE
    trainer = measuring_trainer(cfg, hw, wrap, [ProfileSteps(out)], task, max_epochs=-1, max_steps=steps)
    if trainer.is_global_zero:
        print(hw.summary())
    trainer.fit(model, datamodule=datamodule)
    if trainer.is_global_zero:
        print(f"profile of {ACTIVE} training steps: {out / 'trace.json'} and {out / 'kernels.txt'}")
    return {k: float(v) for k, v in trainer.logged_metrics.items()}
