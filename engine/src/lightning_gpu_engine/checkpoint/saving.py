"""How and when checkpoints reach the disk: atomically, and also mid-epoch so a hard kill loses a bounded amount.

Lightning's own save writes the file through a temporary file in `$TMPDIR` and moves it into place. With `$TMPDIR` on
another filesystem (`/tmp` is often tmpfs) the move is a copy: a kill during it leaves a truncated checkpoint where
the previous good one was, and a full disk leaves a truncated file and a traceback. Here the temporary file is in
the destination directory, so the final rename is atomic: the previous checkpoint survives any failure.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from lightning_gpu_engine.checkpoint.kept import LAST, keep_step
from lightning_gpu_engine.checkpoint.sharded import (
    ShardedWriter,
    fresh_folder,
    is_sharded,
    remove,
    remove_shard_folders,
)
from lightning_gpu_engine.checkpoint.sharded_read import read_sharded
from lightning_gpu_engine.checkpoint.staging import staged
from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.tools.files import out_of_space, partial_path, publish
from lightning_gpu_engine.tools.rundir import last_path


def resume_path(output_dir: str, resume: str | None) -> str | None:
    """The checkpoint --resume names: 'last', 'auto' (None when there is none yet), or a path."""
    if resume is None:
        return None
    if resume == "auto":  # hpc_ckpt_N.ckpt: what Lightning saves when SLURM warns of preemption with SIGUSR1
        found = [*Path(output_dir).glob("hpc_ckpt_*.ckpt"), *filter(Path.exists, [last_path(output_dir)])]
        return str(max(found, key=lambda p: p.stat().st_mtime)) if found else None
    path = last_path(output_dir) if resume == "last" else Path(resume)
    if not (path.is_file() or path.is_dir()):  # a folder: sharded, or what the checks then say is wrong with it
        raise ConfigError("resume", f"no checkpoint at {path}; 'auto' starts afresh when there is none")
    return str(path)


class CheckpointSpaceError(OSError):
    """The disk (or quota) holding the checkpoints is full; says where and how much a checkpoint needs."""

    def __init__(self, path: Path, needed: int) -> None:
        free = shutil.disk_usage(path.parent).free
        super().__init__(
            errno.ENOSPC,
            f"no space left in {path.parent} to save {path.name}: it needs about {needed / 2**20:.0f} MiB "
            f"({needed} bytes), {free / 2**20:.0f} MiB are free",
        )
        self.path, self.needed = path, needed


class NonFiniteWeightsError(RuntimeError):
    """A checkpoint about to be written holds nan or inf weights: written, it would replace the last good one."""

    def __init__(self, step: int, names: list[str]) -> None:
        super().__init__(f"the weights became nan or inf at step {step} ({len(names)} tensors, e.g. {names[0]})")


def non_finite_tensors(state_dict: dict[str, Any]) -> list[str]:
    """The names of the floating-point tensors (weights and buffers) that hold a nan or inf; of a sharded tensor
    (FSDP2's DTensor), in this rank's shard."""
    local = {name: getattr(t, "to_local", lambda t=t: t)() for name, t in state_dict.items()}
    return [
        name
        for name, tensor in local.items()
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]


def tensor_bytes(tree: Any) -> int:
    """The bytes of all tensors in a nested checkpoint: close to its size on disk."""
    if isinstance(tree, torch.Tensor):
        return tree.numel() * tree.element_size()
    if isinstance(tree, dict):
        return sum(tensor_bytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(tensor_bytes(v) for v in tree)
    return 0


def atomic_torch_save(checkpoint: dict[str, Any], path: Path) -> None:
    """torch.save to `.<name>.partial` beside `path`, fsync, then `files.publish`: renamed over `path`, the directory
    fsynced. The partial file has a fixed name, so one a killed save left behind is overwritten by the next save."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(path)
    try:
        with open(partial, "wb") as fh:
            torch.save(checkpoint, fh)
            fh.flush()
            os.fsync(fh.fileno())  # the data is on disk before the name points at it
        publish(partial, path)
    except BaseException as err:
        partial.unlink(missing_ok=True)
        if out_of_space(err):
            raise CheckpointSpaceError(path, tensor_bytes(checkpoint)) from None
        raise
    remove_shard_folders(path)  # a sharded run resumed with --checkpoint-format file: the name's old folders go


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO: never writes non-finite weights, and uses `atomic_torch_save` for local paths, or
    with --checkpoint-format sharded the `sharded.ShardedWriter` (every rank's part, --async-save in the background).

    Every save passes here, whichever callback asks for it and in whatever order the callbacks run, so this is where
    a nan in the weights is refused, and where a checkpoint, once whole, is kept as step-<N>.ckpt (--keep-last,
    kept.py) and uploaded to an object-storage --output-dir (mirror.py). (Under DDP only rank 0 comes here for a file;
    `guards.FiniteLossGuard` makes all ranks refuse together before, so none is left waiting for the others.)
    """

    def __init__(self, sharded: bool = False, asynchronous: bool = False, keep_last: int = 0) -> None:
        super().__init__()
        self.keep_last = keep_last
        self.writer = ShardedWriter(asynchronous, self.published, staged()) if sharded else None
        self.needed: tuple[Path, int] | None = None  # the sharded save in flight: its name and its bytes

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if self.writer is not None:  # one process: no other rank to agree with
            self.save_sharded(checkpoint, Path(path), fresh_folder(Path(path)), 0, agree=None)
            return
        bad = non_finite_tensors(checkpoint.get("state_dict", {}))
        if bad:
            raise NonFiniteWeightsError(int(checkpoint.get("global_step", -1)), bad)
        if storage_options is not None or "://" in str(path):  # remote storage: Lightning's fsspec path
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_torch_save(checkpoint, Path(path))
        self.published(Path(path), int(checkpoint.get("global_step", 0)))
        self.send_files()

    def published(self, final: Path, step: int) -> None:
        """Rank 0, once `final` is whole on disk (a sharded save: in the writer's thread, with --async-save):
        uploaded where --output-dir is a URL, then kept as step-<step>.ckpt with --keep-last."""
        mirror = staged()
        if mirror is not None:
            mirror.put_checkpoint(final, step)
        if self.keep_last and final.name == LAST:
            if mirror is not None:
                mirror.keep_step(final, step, self.keep_last)
            else:
                keep_step(final, step, self.keep_last)

    def send_files(self) -> None:
        """config.yaml and the logs as they stand at a save, from the training thread, which writes them."""
        mirror = staged()
        if mirror is not None:
            mirror.sync_files()

    def save_sharded(
        self, checkpoint: dict[str, Any], path: Path, folder: Path, rank: int, agree: Any, alike: Collection[str] = ()
    ) -> None:
        """Called on every rank at once. `agree`: the strategy's reduce, so that a nan in one rank's shard stops all.
        `alike`: the weights every rank holds alike (`sharded.RankZeroKeepsItsOwn`)."""
        assert self.writer is not None
        bad = non_finite_tensors(checkpoint.get("state_dict", {}))
        anywhere = len(bad) if agree is None else int(agree(torch.tensor(float(len(bad))), reduce_op="sum"))
        if anywhere:
            raise NonFiniteWeightsError(int(checkpoint.get("global_step", -1)), bad or ["(in another rank's shard)"])
        try:
            self.writer.save(checkpoint, path, folder, rank, alike)
            self.needed = (path, tensor_bytes(checkpoint))
            if path.name.startswith("hpc_ckpt_"):  # SLURM's requeue follows at once, and the job's end soon after
                self.writer.wait()
            if rank == 0:
                self.send_files()
        except BaseException as err:
            if out_of_space(err):
                raise CheckpointSpaceError(path, tensor_bytes(checkpoint)) from None
            raise

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        if is_sharded(path):
            return read_sharded(Path(path))
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: Any) -> None:
        if Path(path).is_symlink() or is_sharded(path):
            remove(Path(path))
        else:
            super().remove_checkpoint(path)
        mirror = staged()
        if mirror is not None:
            mirror.removed(Path(path))

    def teardown(self) -> None:
        """The end of fit or test, or a stop: the save in flight is published before anything reads it; a disk that
        filled during it is the same one line as for any save."""
        if self.writer is None:
            return
        try:
            self.writer.wait()
        except BaseException as err:
            if out_of_space(err) and self.needed is not None:
                raise CheckpointSpaceError(*self.needed) from None
            raise


class EveryRankWrites:
    """A strategy of several processes whose every rank writes its part of a sharded checkpoint (Lightning's DDP and
    single-file saves go through rank 0 alone). The path and the folder are rank 0's, so all write to the same. The
    ranks share the writing of the parameters, which the strategy keeps alike on all; the buffers are rank 0's."""

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any | None = None) -> None:
        io = self.checkpoint_io  # type: ignore[attr-defined]
        if not isinstance(io, AtomicCheckpointIO) or io.writer is None:
            super().save_checkpoint(checkpoint, filepath, storage_options)  # type: ignore[misc]
            return
        broadcast = self.broadcast  # type: ignore[attr-defined]
        path = Path(broadcast(str(filepath)))
        folder = Path(broadcast(str(fresh_folder(path))))
        module, rank, reduce = self.lightning_module, self.global_rank, self.reduce  # type: ignore[attr-defined]
        alike = {name for name, _ in module.named_parameters(remove_duplicate=False)}
        io.save_sharded(checkpoint, path, folder, rank, agree=reduce, alike=alike)
