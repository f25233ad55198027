"""Samples per second out of a task's real DataModule loader, by workers and pinned memory.

A sample counts once it is a ready batch on the device, as the module gets it: read, decoded, copied and transformed.
That puts work done in the workers and work done on the device after the copy on the same footing.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import lightning as L
import torch

from lightning_gpu_engine import first_dim

TIMED_BATCHES = 8
Row = dict[str, object]


def worker_counts(cpus: int) -> list[int]:
    """0, then doubling up to all CPUs but one: the default, which issue #11 found needed on a 16-core H100 node."""
    counts = [w for w in (0, 2, 4, 8) if w <= cpus - 1]
    return counts + ([cpus - 1] if cpus - 1 > counts[-1] else [])


def ready_batches(data: L.LightningDataModule, device: torch.device) -> Generator[Any]:  # a Generator, for close()
    """The train loader's batches as the model gets them (evaluation transforms: a benchmark has no trainer)."""
    for batch in data.train_dataloader():
        yield data.on_after_batch_transfer(data.transfer_batch_to_device(batch, device, 0), 0)


def samples_per_second(base: L.LightningDataModule, workers: int, pinned: bool, device: torch.device) -> float:
    """Speed once the pipeline is full: the first `workers + 1` batches, in flight during start-up, are not timed.
    `base`: a DataModule set up, whose hparams include num_workers and pin_memory; its datasets are shared."""
    data = type(base)(**{**base.hparams, "num_workers": workers, "pin_memory": pinned})
    vars(data).update({k: v for k, v in vars(base).items() if k == "datasets"})  # made once, for every configuration
    data.setup("fit")
    batches = ready_batches(data, device)
    for _ in range(workers + 1):
        next(batches)
    start, seen = time.perf_counter(), 0
    for _ in range(TIMED_BATCHES):
        seen += first_dim(next(batches))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    speed = seen / (time.perf_counter() - start)
    batches.close()  # stops the persistent workers
    return speed
