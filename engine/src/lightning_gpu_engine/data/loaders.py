"""Every DataLoader of the project is assembled here, so each one gets the same treatment:

- pinned host memory on CUDA (an asynchronous host-to-device copy) and the worker count that `hardware.resolve`
  chose (affinity- and SLURM-aware);
- workers forked before CUDA is up and started from a forkserver after (`worker_context`);
- workers that leave stop signals to the main process, which saves a checkpoint first, from the moment they are
  forked (`signals.held_back`, `signals.ignore_stop_signals`);
- for training, an order that depends only on (seed, epoch) and a position saved in every checkpoint, so a run
  resumed mid-epoch reads exactly the batches an uninterrupted one would (`ResumableLoader`, restored by
  `resume.ExactResume`).

A task's DataModule returns `train_loader(...)` and `eval_loader(...)` from its `*_dataloader` hooks.
"""

from __future__ import annotations

import atexit
import multiprocessing
import warnings
from collections.abc import Callable, Iterator, Sized
from contextlib import nullcontext
from itertools import islice
from multiprocessing.context import BaseContext, ForkContext, ForkProcess, ForkServerContext, ForkServerProcess
from multiprocessing.process import BaseProcess
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

from lightning_gpu_engine.data.eval_split import EvenShards
from lightning_gpu_engine.tools.signals import held_back, ignore_stop_signals, waiting_for

_END = object()  # the end of an epoch's batches


def train_loader(
    dataset: Dataset[Any],
    batch_size: int,
    seed: int,
    num_workers: int,
    pin_memory: bool,
    collate_fn: Callable[..., Any] | None = None,
) -> ResumableLoader:
    """Shuffled by (seed, epoch), full batches only, its position saved with every checkpoint.
    `num_workers`, `pin_memory`: the resolved hardware's (`hw.num_workers`, `hw.pin_memory`)."""
    # drop_last keeps shapes static: no recompile, no cuDNN re-tune, no tiny last step.
    batches = SkippingBatchSampler(EpochShuffle(dataset, seed), batch_size, drop_last=True)  # type: ignore[arg-type]
    return ResumableLoader(dataset, batch_sampler=batches, **_options(seed, num_workers, pin_memory, collate_fn))


def eval_loader(
    dataset: Dataset[Any],
    batch_size: int,
    num_workers: int,
    pin_memory: bool,
    collate_fn: Callable[..., Any] | None = None,
    seed: int = 0,
) -> DataLoader[Any]:
    """In order, every sample, the last batch smaller: validation, test and predict.py. Under DDP and FSDP every sample
    is read once, on one rank (`EvenShards`): what Lightning warns of, a padded split, does not happen here."""
    warnings.filterwarnings("ignore", r"Using `DistributedSampler` with the dataloaders\. During `trainer\.")
    batches = EvenShards(SequentialSampler(dataset), batch_size)  # type: ignore[arg-type]
    return DataLoader(dataset, batch_sampler=batches, **_options(seed, num_workers, pin_memory, collate_fn))


def _options(seed: int, num_workers: int, pin_memory: bool, collate_fn: Callable[..., Any] | None) -> dict[str, Any]:
    return dict(
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,  # no worker restart cost at every epoch and validation
        generator=torch.Generator().manual_seed(seed),  # seeds the workers, leaving the global RNG alone
        multiprocessing_context=worker_context() if num_workers > 0 else None,
        worker_init_fn=ignore_stop_signals,
        **({"collate_fn": collate_fn} if collate_fn is not None else {}),
    )


def worker_context() -> BaseContext:
    """How loader workers start: forked, unless CUDA is already initialised in this process; with stop signals held
    back until `ignore_stop_signals` runs in the worker (`signals.held_back` says why).

    A forked child inherits every object of the parent, CUDA tensors included (a model moved to the GPU, batches
    cached on it, the benchmark's earlier settings awaiting garbage collection). When the child's garbage collector
    frees one, the CUDA caching allocator runs in a process where CUDA cannot be initialised, and the worker dies
    ("CUDA error: initialization error" from ~TensorImpl): what killed bench.py's loader benchmark on an H100. Making
    sure nothing CUDA is reachable is not possible in general (Lightning moves the model to the GPU before it builds
    the loaders), so after CUDA is up the workers start from a clean forkserver process instead; they then receive
    the dataset by pickling, which ImageFiles (paths) and TensorDataset (shared memory) make cheap."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return _HeldForkServerContext()
    return _HeldForkContext()


class _LoaderWorker(BaseProcess):
    """A loader worker ignores SIGTERM (`ignore_stop_signals`), so where PyTorch or multiprocessing would end one with
    SIGTERM and then wait for it, it gets SIGKILL."""

    def start(self) -> None:
        with held_back():
            super().start()
        # Run before multiprocessing's own exit handler (the last registered runs first), which would wait forever
        atexit.unregister(_end_loader_workers)
        atexit.register(_end_loader_workers)

    def terminate(self) -> None:  # PyTorch's, for a worker that did not end when its loader was done
        self.kill()


def _end_loader_workers() -> None:
    """At exit: the workers of a loader still being read, by a script's own loop for instance."""
    for child in multiprocessing.active_children():
        if isinstance(child, _LoaderWorker):
            child.kill()
            child.join()


# Module-level classes: a forkserver receives the process object pickled, by its class's qualified name.
class _HeldFork(_LoaderWorker, ForkProcess):
    pass


class _HeldForkServer(_LoaderWorker, ForkServerProcess):
    pass


class _HeldForkContext(ForkContext):
    Process = _HeldFork


class _HeldForkServerContext(ForkServerContext):
    Process = _HeldForkServer


class EpochShuffle(RandomSampler):
    """A permutation that depends only on (seed, epoch), so a resumed run draws the order an uninterrupted one did.

    Being a RandomSampler tells Lightning that the loader shuffles: with several devices it swaps in a
    DistributedSampler, which is seeded by (seed, epoch) in the same way.
    """

    def __init__(self, data_source: Sized, seed: int) -> None:
        super().__init__(data_source)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls it at every epoch start
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


class SkippingBatchSampler(BatchSampler):
    """After a mid-epoch restore, passes over the batches already trained on, as indices only.

    `skip` stays set until the loader has its first batch: DataLoader may start iterating the sampler more than once
    before that (the worker iterator does so twice).
    """

    skip = 0

    def __iter__(self) -> Iterator[list[int]]:
        return islice(super().__iter__(), self.skip, None)


class ResumableLoader(DataLoader):
    """A train loader that knows its place in the epoch; `ExactResume` saves and restores it with the checkpoint.

    Build it with `batch_sampler=SkippingBatchSampler(...)` and a seeded `generator`: the generator is what seeds the
    loader workers, so iterating never draws from the global RNG that the augmentation uses.
    """

    batches_done = 0

    # A generator, so nothing is read before the first batch is asked for: after Lightning has set the epoch.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        assert isinstance(self.batch_sampler, SkippingBatchSampler)
        self.batches_done = self.batch_sampler.skip
        batches = super().__iter__()
        # with workers this process only waits for the batch, and a stop signal may end the wait (signals.Waiting)
        waiting = waiting_for if self.num_workers > 0 else nullcontext
        while True:
            with waiting():
                batch = next(batches, _END)
            if batch is _END:
                return
            self.batch_sampler.skip = 0  # this epoch's indices are drawn: the next epoch starts whole
            self.batches_done += 1  # counted when handed out, so a checkpoint after step n says n
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"batches_done": self.batches_done}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        done = state_dict["batches_done"]
        assert isinstance(self.batch_sampler, SkippingBatchSampler)
        # A checkpoint taken after an epoch's last batch starts the next epoch whole.
        self.batch_sampler.skip = done if done < len(self.batch_sampler) else 0
