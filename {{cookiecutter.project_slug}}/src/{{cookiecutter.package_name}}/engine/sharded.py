"""--checkpoint-format sharded and --async-save: every rank writes its own part of a checkpoint, in the background if
asked, and the checkpoint's name points at it only once all of it is on disk.

The layout is Lightning's own distributed checkpoint (what its ModelParallelStrategy writes and reads): a folder with
`torch.distributed.checkpoint` files for the weights (`state_dict`) and each optimizer (`optimizer_N`), and `meta.pt`,
rank 0's torch.save of everything else (loops, callbacks, hparams). Under FSDP2 each rank writes its shards; under
DDP, where every rank holds the same tensors, DCP shares their writing out between the ranks.

A folder cannot be renamed over another atomically, so the name (`last.ckpt`, `best-...ckpt`) is a symbolic link to
a hidden folder beside it, `.<name>.shards-<letters>`: the shards are written there, then a new link is renamed over the
name (atomic), and the folder the name pointed to before is removed. A kill at any moment leaves the name on a whole
checkpoint; a folder that a kill left half-written is removed by the next save of the same name. The link's target is
relative, so a moved or copied --output-dir keeps working.
"""

from __future__ import annotations

import os
import secrets
import shutil
import string
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

META = "meta.pt"  # Lightning's name for the non-tensor part (lightning.fabric.utilities.load._METADATA_FILENAME)


def check_format(cfg: Any, fsdp2: bool) -> None:
    """FSDP1 (a task without `Task.fsdp2`) gathers its checkpoints through its own state-dict machinery, not here."""
    from .config import ConfigError

    if cfg.checkpoint_format == "sharded" and cfg.strategy == "fsdp" and not fsdp2:
        raise ConfigError(
            "checkpoint_format",
            "sharded is for one device, DDP and FSDP2; this task's --strategy fsdp is FSDP1, which gathers one file: "
            "use --checkpoint-format file",
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


class ShardedWriter:
    """Writes sharded checkpoints, one at a time: a save waits for the one before it. With `asynchronous`, a save
    copies the tensors to host memory (the only time training waits) and writes them in a background thread; the
    name is switched by rank 0 once every rank's part is written."""

    def __init__(self, asynchronous: bool) -> None:
        self.asynchronous = asynchronous
        self.pending: Future[Any] | None = None
        self.published = threading.Event()
        self.failure: BaseException | None = None
        self.group: Any = None

    def save(self, checkpoint: dict[str, Any], final: Path, folder: Path, rank: int) -> None:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemWriter

        self.wait()
        tensors, rest = split(checkpoint)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if rank == 0:
                with open(folder / META, "wb") as fh:
                    torch.save(rest, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
            distributed = dist.is_available() and dist.is_initialized()
            writer = FileSystemWriter(folder)
            if not self.asynchronous:
                dcp.save(tensors, storage_writer=writer)
                if rank == 0:
                    publish_folder(folder, final)
                return
            if distributed and self.group is None:
                # the writing thread's collectives need a group of their own: training's run on the default one
                self.group = dist.new_group(backend="gloo")
            self.published.clear()
            saving = dcp.async_save(tensors, storage_writer=writer, process_group=self.group)
        except BaseException:  # a full disk, a stop: the name stays on the last whole checkpoint, and this goes
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if not isinstance(saving, Future):  # an AsyncSaveResponse comes only with a stager of one's own
            saving = saving.upload_completion
        saving.add_done_callback(lambda done: self._finish(done, folder, final, rank))
        self.pending = saving

    def _finish(self, done: Future[Any], folder: Path, final: Path, rank: int) -> None:
        try:
            done.result()
            if rank == 0:
                publish_folder(folder, final)
        except BaseException as err:  # raised in the training thread by the next wait()
            shutil.rmtree(folder, ignore_errors=True)
            self.failure = err
        finally:
            self.published.set()

    def wait(self) -> None:
        """Until the save in flight is written and published; its failure is raised here."""
        if self.pending is None:
            return
        self.pending = None
        self.published.wait()
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure
