"""Evaluation batches that count every sample once under DDP and FSDP, so that a validation or test on N ranks gives
the numbers one device gives for the same checkpoint.

Lightning shares an evaluation split between ranks with a DistributedSampler, which pads the split to a multiple of
the world size by repeating samples: with 9 test samples on 2 ranks, one of them counted twice in test/acc. Lightning
rebuilds the loader's batch sampler around that DistributedSampler; `EvenShards` takes only its rank and world size
from it and gives each rank its own samples, in as many batches as every other rank. Equal batch counts matter: FSDP
gathers the weights at every forward, and `StopOnSignal` agrees on a stop after every test batch, so a rank
with one batch fewer would leave the others waiting forever.

Shards that differ by a sample need `ExactMeans` too: Lightning averages a `self.log(..., sync_dist=True)` value over
ranks as (mean of weighted sums) / (mean of sample counts), and the counts are integers, so 9 samples on 2 ranks
became 4 rather than 4.5, and test/loss came out 12.5% high. The padded split had hidden that by making the counts
equal.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy
from torch.utils.data import BatchSampler, DistributedSampler, Sampler


class EvenShards(BatchSampler):
    def __init__(self, sampler: Sampler[int], batch_size: int, drop_last: bool = False) -> None:
        super().__init__(sampler, batch_size, drop_last=False)  # evaluation reads every sample
        self.batches = self._split()

    def _split(self) -> list[list[int]]:
        sampler, size = self.sampler, self.batch_size
        if not isinstance(sampler, DistributedSampler) or sampler.num_replicas == 1:
            return chunks(list(sampler), size)
        total, world = len(sampler.dataset), sampler.num_replicas  # type: ignore[arg-type]
        mine = list(range(sampler.rank, total, world))
        longest = math.ceil(math.ceil(total / world) / size)  # batches of the rank with the most samples
        # batch size 1 with a split not divisible by the world size, or fewer samples than ranks
        if len(mine) < longest:
            repeated = sampler.total_size - total
            warnings.warn(
                f"{repeated} of {total} evaluation samples are counted twice: {world} ranks cannot share them in equal "
                f"batch counts at batch size {size}; evaluate on one device for exact numbers",
                stacklevel=2,
            )
            return chunks(list(sampler), size)  # Lightning's padded split: equal counts, a few repeats
        batches = chunks(mine, size)
        while len(batches) < longest:  # at most one fewer: halve the largest batch
            largest = max(range(len(batches)), key=lambda i: len(batches[i]))
            half = len(batches[largest]) // 2
            batches[largest : largest + 1] = [batches[largest][:half], batches[largest][half:]]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def chunks(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]


class ExactMeans:
    """A strategy whose mean over ranks of an integer tensor (the sample counts behind every logged mean) is not
    rounded down to an integer."""

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        if isinstance(tensor, torch.Tensor) and not tensor.is_floating_point() and reduce_op in ("mean", "avg"):
            tensor = tensor.double()
        return super().reduce(tensor, group, reduce_op)  # type: ignore[misc]


class ExactDDP(ExactMeans, DDPStrategy):
    pass


class ExactFSDP(ExactMeans, FSDPStrategy):
    pass
