"""--checkpoint-format sharded and --async-save: every rank writes its own part of a checkpoint, in the background if
asked, and the checkpoint's name points at it only once all of it is on disk.

The layout is Lightning's own distributed checkpoint (what its ModelParallelStrategy writes and reads): a folder with
`torch.distributed.checkpoint` files for the weights (`state_dict`) and each optimizer (`optimizer_N`), and `meta.pt`,
rank 0's torch.save of everything else (loops, callbacks, hparams). Under FSDP2 each rank writes its shards; under
DDP, where every rank holds the same tensors, DCP shares their writing out between the ranks.

A folder cannot be renamed over another atomically, so the name (`last.ckpt`, `best-...ckpt`) is a symbolic link to
a hidden folder beside it, `.<name>.shards-<ns>`: the shards are written there, then a new link is renamed over the
name (atomic), and the folder the name pointed to before is removed. A kill at any moment leaves the name on a whole
checkpoint; a folder that a kill left half-written is removed by the next save of the same name. The link's target is
relative, so a moved or copied --output-dir keeps working.
"""

from __future__ import annotations

import io
import os
import shutil
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


def read_sharded(path: Path) -> dict[str, Any]:
    """The whole checkpoint in a sharded folder as one dict, as torch.load gives a file's: full tensors on the CPU.

    Read with weights_only everywhere: DCP itself unpickles its non-tensor items with weights_only=False, so each is
    tried the safe way first, and one that carries code is refused (pickle.UnpicklingError) before it runs."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    class SafePlanner(_EmptyStateDictLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            data = value.read()
            torch.load(io.BytesIO(data), weights_only=True)
            super().load_bytes(read_item, io.BytesIO(data))

    tensors: dict[str, Any] = {}
    _load_state_dict(tensors, storage_reader=FileSystemReader(path), planner=SafePlanner(), no_dist=True)
    checkpoint = torch.load(path / META, map_location="cpu", weights_only=True)
    checkpoint["state_dict"] = tensors.pop("state_dict")
    optimizers = sorted((k for k in tensors if k.startswith("optimizer_")), key=lambda k: int(k.split("_")[1]))
    checkpoint["optimizer_states"] = [numbered(tensors.pop(k)) for k in optimizers]
    return checkpoint


def numbered(optimizer: dict[str, Any]) -> dict[str, Any]:
    """DCP keeps dict keys as strings: a torch optimizer's state is keyed by parameter numbers, which it matches to
    the numbers in its param_groups, so "0" would load as no state at all. (FSDP2's are names: kept.)"""
    state = optimizer.get("state", {})
    return {**optimizer, "state": {int(k) if str(k).isdigit() else k: v for k, v in state.items()}}


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
    for old in final.parent.glob(f".{final.name}.shards-*"):
        if old != folder:
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
        else:
            if distributed and self.group is None:
                # the writing thread's collectives need a group of their own: training's run on the default one
                self.group = dist.new_group(backend="gloo")
            self.published.clear()
            saving = dcp.async_save(tensors, storage_writer=writer, process_group=self.group)
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
