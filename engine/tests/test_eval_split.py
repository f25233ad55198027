"""How an evaluation split is shared between ranks: every sample once, in equal batch counts (FSDP gathers weights at
every forward, and the ranks agree on a stop after every test batch); the 2-rank run itself is test_own_task.py's."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import DistributedSampler, SequentialSampler, TensorDataset

from lightning_gpu_engine.data.eval_split import EvenShards


def shards(samples: int, world: int, batch_size: int) -> list[list[list[int]]]:
    split = TensorDataset(torch.arange(samples))
    return [
        EvenShards(DistributedSampler(split, num_replicas=world, rank=r, shuffle=False), batch_size).batches
        for r in range(world)
    ]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_sample_is_read_once_in_equal_batch_counts_of_at_most_the_batch_size(world: int) -> None:
    for samples, batch_size in itertools.product(range(world, 41), range(2, 6)):
        ranks = shards(samples, world, batch_size)
        read = sorted(i for batches in ranks for batch in batches for i in batch)
        assert read == list(range(samples)), (samples, batch_size)
        assert len({len(batches) for batches in ranks}) == 1, (samples, batch_size, ranks)
        assert all(0 < len(batch) <= batch_size for batches in ranks for batch in batches)


def test_one_device_reads_in_order_the_last_batch_smaller() -> None:
    assert EvenShards(SequentialSampler(range(7)), 3).batches == [[0, 1, 2], [3, 4, 5], [6]]


def test_where_equal_counts_need_a_repeat_it_says_how_many_samples_count_twice() -> None:
    with pytest.warns(UserWarning, match=r"^1 of 5 evaluation samples are counted twice: 2 ranks"):
        ranks = shards(5, 2, 1)  # batch size 1: 3 batches against 2
    assert [len(batches) for batches in ranks] == [3, 3]
