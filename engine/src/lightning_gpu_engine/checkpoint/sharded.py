"""--checkpoint-format sharded and --async-save: every rank writes its own part of a checkpoint, in the background if
asked, and the checkpoint's name points at it only once all of it is on disk.

The layout is Lightning's own distributed checkpoint (what its ModelParallelStrategy writes and reads): a folder with
`torch.distributed.checkpoint` files for the weights (`state_dict`) and each optimizer (`optimizer_N`), and `meta.pt`,
rank 0's torch.save of everything else (loops, callbacks, hparams). Under FSDP2 each rank writes its shards; under
DDP, where every rank holds the same parameters and optimizer state, DCP shares their writing out between the ranks.
What a rank holds as its own is rank 0's, as in a one-file save (`RankZeroKeepsItsOwn`).

A folder cannot be renamed over another atomically, so the name (`last.ckpt`, `best-...ckpt`) is a symbolic link to
a hidden folder beside it, `.<name>.shards-<letters>`: the shards are written there, then a new link is renamed over the
name (atomic), and the folder the name pointed to before is removed. A kill at any moment leaves the name on a whole
checkpoint; a folder that a kill left half-written is removed by the next save of the same name. The link's target is
relative, so a moved or copied --output-dir keeps working.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import string
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.checkpoint.planner import SavePlan, WriteItem, WriteItemType

from lightning_gpu_engine.checkpoint.store import StoreError

if TYPE_CHECKING:
    from lightning_gpu_engine.checkpoint.mirror import Mirror

META = "meta.pt"  # Lightning's name for the non-tensor part (lightning.fabric.utilities.load._METADATA_FILENAME)


def check_format(cfg: Any, fsdp2: bool, lightning_strategy: str | None = None, world_size: int = 1) -> None:
    """FSDP1 (a task without `Task.fsdp2`) gathers its checkpoints through its own state-dict machinery, not here. A
    Lightning strategy of the task's own (`Task.lightning_strategy`, which replaces the engine's DDP where that would
    run) saves on rank 0 alone: DCP's save there would wait for the other ranks forever (it hung at the first save)."""
    from lightning_gpu_engine.config.values import ConfigError

    if cfg.checkpoint_format == "sharded" and cfg.strategy == "fsdp" and not fsdp2:
        raise ConfigError(
            "checkpoint_format",
            "sharded is for one device, DDP and FSDP2; this task's --strategy fsdp is FSDP1, which gathers one file: "
            "use --checkpoint-format file",
        )
    replaced = cfg.strategy == "ddp" or (cfg.strategy != "fsdp" and world_size > 1)  # trainer.build_strategy's choice
    if cfg.checkpoint_format == "sharded" and lightning_strategy and replaced:
        raise ConfigError(
            "checkpoint_format",
            f"sharded is written by the engine's own DDP and FSDP2; this task runs Lightning's {lightning_strategy!r} "
            "strategy (Task.lightning_strategy), which saves from rank 0 alone: use --checkpoint-format file",
        )


def is_sharded(path: str | Path) -> bool:
    return Path(path).is_dir() and Path(path, META).is_file()


def split(checkpoint: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the tensors DCP writes, the rest for meta.pt), as Lightning's ModelParallelStrategy splits them."""
    rest = dict(checkpoint)
    tensors = {"state_dict": rest.pop("state_dict")}
    tensors.update({f"optimizer_{i}": state for i, state in enumerate(rest.pop("optimizer_states", []))})
    return tensors, rest


def fresh_folder(final: Path) -> Path:
    """Where the next sharded save of `final` is written before `final` points at it. Letters only: Lightning numbers
    SLURM's saves by the digits it finds after "ckpt_" in any name in the --output-dir. From `secrets`: the seeded
    generators are part of what a resume restores."""
    letters = "".join(secrets.choice(string.ascii_lowercase) for _ in range(12))
    return final.with_name(f".{final.name}.shards-{letters}")


def publish_folder(folder: Path, final: Path) -> None:
    """Point `final` at the finished `folder` beside it (atomically), then remove what it pointed at before and any
    folder of the same name a kill left behind."""
    link = final.with_name(f".{final.name}.link")
    link.unlink(missing_ok=True)
    os.symlink(folder.name, link)
    if final.is_dir() and not final.is_symlink():  # a real folder (Lightning's own sharded save): no rename over it
        shutil.rmtree(final)
    os.replace(link, final)
    directory = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    remove_shard_folders(final, keep=folder)


def remove_shard_folders(final: Path, keep: Path | None = None) -> None:
    """The hidden folders of `final` but `keep`: those it pointed at before, and those a kill left half-written."""
    for old in final.parent.glob(f".{final.name}.shards-*"):
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def remove(final: Path) -> None:
    """A sharded checkpoint's name and its folder (ModelCheckpoint dropping an old best)."""
    target = final.resolve() if final.is_symlink() else None
    if final.is_symlink() or final.is_file():
        final.unlink()
    elif final.is_dir():
        shutil.rmtree(final)
    if target is not None and target.parent == final.parent.resolve():
        shutil.rmtree(target, ignore_errors=True)


class RankZeroKeepsItsOwn(DefaultSavePlanner):
    """DCP's planner, but a tensor that the ranks do not all hold alike is written from rank 0's copy alone.

    DCP takes every plain tensor that several ranks offer as one tensor held by all, and writes it from whichever
    rank has the least to write so far. That holds for DDP's parameters and optimizer state (the averaged gradients
    keep them equal bit for bit), not for buffers: each rank updates BatchNorm's running statistics from its own
    batches, and DDP makes rank 0's the truth by broadcasting them at the start of the next forward pass. Written
    from rank 1, a resume would restore rank 1's statistics and part from the uninterrupted run. So the other ranks
    offer only what they hold alike (`alike`: the names in `state_dict` of the parameters; the optimizers' states)
    and their own shards of a sharded tensor (FSDP2's); rank 0 offers everything, and writes what only it offers.
    """

    def __init__(self, alike: Collection[str]) -> None:
        super().__init__()
        self.alike = frozenset(alike)

    def create_local_plan(self) -> SavePlan:
        plan = super().create_local_plan()
        if not self.is_coordinator:  # rank 0 of the saving group
            self.plan = plan = dataclasses.replace(plan, items=[i for i in plan.items if self.held_alike(i)])
        return plan

    def held_alike(self, item: WriteItem) -> bool:
        if item.type == WriteItemType.SHARD:  # this rank's own part of a sharded tensor: no other rank has it
            return True
        if item.type != WriteItemType.TENSOR:  # a plain value (a param group's lr, a module's extra state): rank 0's
            return False
        top, name = (*map(str, self.mappings.get(item.index.fqn, ())), "", "")[:2]
        return (top == "state_dict" and name in self.alike) or (top.startswith("optimizer_") and name == "state")


class ShardedWriter:
    """Writes sharded checkpoints, one at a time: a save waits for the one before it. With `asynchronous`, a save
    copies the tensors to host memory (the only time training waits) and writes them in a background thread; the
    name is switched by rank 0 once every rank's part is written (and, to an object-storage --output-dir, uploaded:
    each rank its own part, mirror.py), and then `published(name, step)` is called there."""

    def __init__(
        self, asynchronous: bool, published: Callable[[Path, int], None] | None = None, mirror: Mirror | None = None
    ) -> None:
        self.asynchronous = asynchronous
        self.published, self.mirror = published, mirror
        self.pending: Future[Any] | None = None
        self.done = threading.Event()
        self.failure: BaseException | None = None
        self.group: Any = None

    def save(
        self, checkpoint: dict[str, Any], final: Path, folder: Path, rank: int, alike: Collection[str] = ()
    ) -> None:
        """`alike`: the names in the checkpoint's `state_dict` that every rank holds bit for bit alike (DDP's
        parameters); any rank may write those, rank 0 writes the rest."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemWriter

        self.wait()
        tensors, rest = split(checkpoint)
        step = int(rest.get("global_step", 0))
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if rank == 0:
                with open(folder / META, "wb") as fh:
                    torch.save(rest, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
            distributed = dist.is_available() and dist.is_initialized()
            writer, planner = FileSystemWriter(folder), RankZeroKeepsItsOwn(alike)
            if distributed and self.group is None and (self.asynchronous or self.mirror is not None):
                # the writing thread's collectives, and the ranks' word on their uploads, need a group of their own
                # on the CPU: training's run on the default one
                self.group = dist.new_group(backend="gloo")
            if not self.asynchronous:
                dcp.save(tensors, storage_writer=writer, planner=planner)
                self._publish(folder, final, rank, step)
                return
            self.done.clear()
            saving = dcp.async_save(tensors, storage_writer=writer, planner=planner, process_group=self.group)
        except BaseException as err:  # a full disk, a stop: the name stays on the last whole checkpoint, and this goes
            if not isinstance(err, StoreError):  # what the store did not get stays on this node, as its line says
                shutil.rmtree(folder, ignore_errors=True)
            raise
        if not isinstance(saving, Future):  # an AsyncSaveResponse comes only with a stager of one's own
            saving = saving.upload_completion
        saving.add_done_callback(lambda done: self._finish(done, folder, final, rank, step))
        self.pending = saving

    def _publish(self, folder: Path, final: Path, rank: int, step: int) -> None:
        """Once every rank's part is on disk: uploaded, each rank its own, and the ranks agree it all went; then the
        name is switched to it (rank 0)."""
        if self.mirror is not None:
            said = ""
            try:
                self.mirror.put_parts(folder, rank)
            except StoreError as err:
                said = str(err)
            if self.group is not None:  # every rank's words, so rank 0 can say which part failed, and all stop
                heard: list[Any] = [None] * torch.distributed.get_world_size(self.group)
                torch.distributed.all_gather_object(heard, said, group=self.group)
                said = said or next((words for words in heard if words), "")
            if said:
                raise StoreError(said)
        if rank == 0:
            publish_folder(folder, final)
            if self.published is not None:
                self.published(final, step)

    def _finish(self, done: Future[Any], folder: Path, final: Path, rank: int, step: int) -> None:
        try:
            done.result()
            self._publish(folder, final, rank, step)
        except BaseException as err:  # raised in the training thread by the next wait()
            if not isinstance(err, StoreError):
                shutil.rmtree(folder, ignore_errors=True)
            self.failure = err
        finally:
            self.done.set()

    def wait(self) -> None:
        """Until the save in flight is written and published; its failure is raised here."""
        if self.pending is None:
            return
        self.pending = None
        self.done.wait()
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure
