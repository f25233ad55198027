"""Checkpoints read before a run or a tool starts: refused in one line where unsafe, damaged, not Lightning's, or for
another network; a file or a sharded folder (--checkpoint-format sharded) alike."""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.distributed.checkpoint import CheckpointException

from lightning_gpu_engine.checkpoint.averaged import drop_training_copy
from lightning_gpu_engine.checkpoint.sharded import is_sharded
from lightning_gpu_engine.checkpoint.sharded_read import damage, read_sharded
from lightning_gpu_engine.config.values import ConfigError


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint train.py wrote, file or sharded folder, as one dict of CPU tensors and plain values."""
    return read_sharded(Path(path)) if is_sharded(path) else torch.load(path, map_location="cpu", weights_only=True)


TRAINING_KEYS = ("state_dict", "global_step", "loops", "optimizer_states")  # what `fit(ckpt_path=...)` reads


def check_checkpoint(
    path: Path,
    model: L.LightningModule | None = None,
    option: str = "resume",
    training: bool = True,
    tensors: bool = True,
) -> dict[str, Any]:
    """Refuse, before anything starts, a checkpoint that is unsafe, damaged, not Lightning's, or for another model.

    Lightning is asked to load with weights_only=True, which never unpickles code; this reads the file the same way
    first, so each refusal is one line (blaming --`option`) instead of a traceback from inside `fit`. `training`:
    it must hold the optimizer and loop state to continue from, not only weights; without it, the raw weights kept
    beside an average are left out (`averaged.drop_training_copy`). Returns the (memory-mapped) contents;
    of a sharded folder without `tensors`, meta tensors of the saved shapes (what the checks read: a resume loads the
    shards itself, each rank its own).
    """
    sharded = path.is_dir()  # is_sharded() needs its meta.pt: a folder without it is one that is damaged
    problem = damage(path) if sharded else None
    if problem is not None:
        raise ConfigError(option, f"{path} is a damaged sharded checkpoint: {problem}; give another checkpoint")
    if not sharded and path.stat().st_size == 0:
        raise ConfigError(option, f"{path} is empty (0 bytes): a save that never finished; give another checkpoint")
    # a zip archive: what torch.save has written since PyTorch 1.6, and Lightning always
    if not sharded and not zipfile.is_zipfile(path):
        raise ConfigError(
            option,
            f"{path} is not a checkpoint written by torch.save (not a zip archive: truncated, "
            "legacy or another format); give a .ckpt that train.py wrote",
        )
    try:
        if sharded:
            checkpoint = read_sharded(path, tensors)
        else:  # memory-mapped: a look at a large checkpoint reads little of it
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as err:
        # weights_only's two wordings: a global it does not allow, and one from a module it blocks (os, subprocess)
        found = re.search(r"unsupported (?:global: )?GLOBAL (\S+)", str(err), flags=re.I)
        what = f"a pickled {found.group(1)}" if found else "pickled objects"
        raise ConfigError(
            option, f"{path} holds {what}, not just tensors and plain values; refusing to unpickle it"
        ) from None
    except (RuntimeError, OSError, EOFError, CheckpointException) as err:
        # what the rank met, not torch's "CheckpointException ranks:dict_keys([0])"
        met = next(iter(err.failures.values()))[0] if isinstance(err, CheckpointException) else err
        reason = (str(met).strip() or type(met).__name__).splitlines()[0]
        raise ConfigError(option, f"{path} is not a readable checkpoint ({reason}); give another one") from None
    needed = TRAINING_KEYS if training else TRAINING_KEYS[:1]
    missing = [key for key in needed if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        what = f"a {type(checkpoint).__name__}" if not isinstance(checkpoint, dict) else f"no {', '.join(missing)}"
        kind = "training checkpoint" if training else "checkpoint"
        raise ConfigError(
            option,
            f"{path} is not a Lightning {kind} ({what}); give a last.ckpt, hpc_ckpt_N.ckpt or best-*.ckpt that "
            "train.py wrote",
        )
    hparams = checkpoint.get("hyper_parameters") or {}
    if isinstance(hparams, dict) and "_instantiator" in hparams:  # Lightning would import and call it (CVE-2026-58659)
        raise ConfigError(
            option,
            f"{path} names an _instantiator ({hparams['_instantiator']!r}) that loading would "
            "import and run; refusing it. train.py never writes one",
        )
    if model is not None:
        check_same_network(path, checkpoint, model, option)
    if not training:  # a tool's: the weights it uses are the average, where --ema kept one
        drop_training_copy(checkpoint)
    return checkpoint


def check_same_network(path: Path, checkpoint: dict[str, Any], model: L.LightningModule, option: str) -> None:
    """The checkpoint's weights must fit this run's network; if not, name the options that differ."""
    saved, ours = checkpoint["state_dict"], model.state_dict()
    clash = next((k for k in ours if k not in saved or saved[k].shape != ours[k].shape), None)
    clash = clash or next((k for k in saved if k not in ours), None)
    if clash is None:
        return
    theirs = checkpoint.get("hyper_parameters") or {}
    differ = [
        f"{k}={theirs[k]!r} (this run: {v!r})" for k, v in model.hparams.items() if k in theirs and theirs[k] != v
    ]
    theirs_shape, our_shape = (tuple(d[clash].shape) if clash in d else "absent" for d in (saved, ours))
    what = ", ".join(differ) if differ else f"weights differ ({clash}: {theirs_shape} vs {our_shape})"
    raise ConfigError(
        option,
        f"{path} is for another network: {what}; resume with the options it was trained "
        "with, or start afresh in another --output-dir",
    )
