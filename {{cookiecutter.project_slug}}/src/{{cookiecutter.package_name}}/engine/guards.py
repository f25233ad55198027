"""What can only go wrong once a run has started, each told in one line with the cause and what to try.

Bad options are refused before anything starts (the options dataclasses, hardware.py, the task). This module covers the
rest: a checkpoint that is more than tensors, a nan or inf loss, running out of memory, a stop signal.
"""

from __future__ import annotations

import pickle
import re
import signal
import sys
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .checkpoints import CheckpointSpaceError, NonFiniteWeightsError, last_path, non_finite_tensors
from .cli import fail
from .config import Config, ConfigError
from .resume import StopOnSignal

TRAINING_KEYS = ("state_dict", "global_step", "loops", "optimizer_states")  # what `fit(ckpt_path=...)` reads


def check_checkpoint(
    path: Path, model: L.LightningModule | None = None, option: str = "resume", training: bool = True
) -> dict[str, Any]:
    """Refuse, before anything starts, a checkpoint that is unsafe, damaged, not Lightning's, or for another model.

    Lightning is asked to load with weights_only=True, which never unpickles code; this reads the file the same way
    first, so each refusal is one line (blaming --`option`) instead of a traceback from inside `fit`. `training`:
    it must hold the optimizer and loop state to continue from, not only weights. Returns the (memory-mapped) contents.
    """
    if path.stat().st_size == 0:
        raise ConfigError(option, f"{path} is empty (0 bytes): a save that never finished; give another checkpoint")
    if not zipfile.is_zipfile(path):  # what torch.save has written since PyTorch 1.6, and Lightning always
        raise ConfigError(
            option,
            f"{path} is not a checkpoint written by torch.save (not a zip archive: truncated, "
            "legacy or another format); give a .ckpt that train.py wrote",
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        what = f"a pickled {found.group(1)}" if found else "pickled objects"
        raise ConfigError(
            option, f"{path} holds {what}, not just tensors and plain values; refusing to unpickle it"
        ) from None
    except (RuntimeError, OSError, EOFError) as err:
        reason = str(err).strip().splitlines()[0]
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


def check_enough_data(
    datamodule: L.LightningDataModule, batch_size: int, world_size: int, unit: str = "samples"
) -> None:
    """A training set smaller than one batch per device trains nothing (drop_last) and would still exit 0."""
    datamodule.setup("fit")
    size = len(datamodule.train_dataloader().dataset)  # type: ignore[arg-type]
    if size // world_size < batch_size:
        per = f" over {world_size} devices" if world_size > 1 else ""
        raise ConfigError(
            "batch_size",
            f"{batch_size} is more than the {size} training {unit}{per}: nothing would "
            f"be trained; use --batch-size {max(1, size // world_size)} or less, or more {unit}",
        )


class NonFiniteLossError(RuntimeError):
    def __init__(self, step: int) -> None:
        super().__init__(f"the training loss became nan or inf at step {step}")


class FiniteLossGuard(Callback):
    """Stops at the first nan or inf training loss, before any checkpoint is written with the weights it produced.

    Each step only updates a flag on the device. The flag is read every `every_n_steps` steps (pass the logging
    interval: logging waits for the GPU then anyway) and before every checkpoint, so ordinary steps get no extra
    GPU-to-CPU synchronisation.
    """

    def __init__(self, every_n_steps: int) -> None:
        self.every_n_steps = every_n_steps
        self._first_bad: torch.Tensor | None = None  # the step of the first non-finite loss, -1 while there is none

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, Mapping) else outputs
        if loss is None:
            return
        if self._first_bad is None:
            self._first_bad = torch.full((), -1, dtype=torch.long, device=loss.device)
        newly_bad = ~torch.isfinite(loss.detach()) & (self._first_bad < 0)
        self._first_bad = torch.where(newly_bad, trainer.global_step, self._first_bad)
        if trainer.global_step % self.every_n_steps == 0:
            self._check(trainer)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._check(trainer)
        # A save due at this very step can come before this step's loss is looked at (the callbacks' order), so the
        # weights themselves are checked too, on every rank, and all refuse together
        bad = non_finite_tensors(checkpoint["state_dict"])
        if trainer.strategy.reduce_boolean_decision(bool(bad), all=False):
            raise NonFiniteWeightsError(trainer.global_step, bad or ["on another rank"])

    def _check(self, trainer: L.Trainer) -> None:
        step = -1 if self._first_bad is None else int(self._first_bad.item())
        if trainer.strategy.reduce_boolean_decision(step >= 0, all=False):  # all ranks stop at the same step
            raise NonFiniteLossError(step if step >= 0 else trainer.global_step)


def scale_batch_size(trainer: L.Trainer, model: L.LightningModule, datamodule: L.LightningDataModule) -> int:
    """The largest power-of-two multiple of --batch-size whose training steps fit in memory, by Lightning's finder.

    Powers of two keep the batch a multiple of 8, which tensor cores want; the search stops at the data set size.
    """
    from lightning.pytorch.tuner import Tuner

    start = datamodule.hparams["batch_size"]
    found = Tuner(trainer).scale_batch_size(model, datamodule=datamodule, mode="power", init_val=start)
    size = int(found or start)
    if trainer.is_global_zero:
        print(f"auto batch size: {size} per device fits (started from {start})")
    return size


@contextmanager
def explain_failures(
    cfg: Config, trainer: L.Trainer, datamodule: L.LightningDataModule, unit: str = "samples"
) -> Iterator[None]:
    """Turns the failures of a started run into one line: what happened, where, and what to try. `unit`: the task's
    samples (images), for the out-of-memory line."""
    try:
        yield
    except ConfigError as err:
        fail(str(err))
    except (NonFiniteLossError, NonFiniteWeightsError) as err:
        last = last_path(cfg.output_dir)
        kept = f"the last good checkpoint {last} is untouched" if last.is_file() else "no checkpoint was written"
        # A fresh start: a resumed run would continue the saved optimizer and schedule
        fail(
            f"{err}; {kept}. Start again in another --output-dir with a lower --lr (now {cfg.lr:g}) or "
            "--gradient-clip-val 1.0, and --precision bf16-mixed rather than 16-mixed (fp16 overflows where bf16 "
            "does not)",
            code=1,
        )
    except torch.OutOfMemoryError:
        size = datamodule.hparams.get("batch_size", cfg.batch_size)
        fail(
            f"--batch-size: out of memory with {size} {unit} per device; "
            f"lower it, e.g. --batch-size {max(1, size // 2)} --accumulate-grad-batches "
            f"{2 * cfg.accumulate_grad_batches} keeps the global batch, or let --auto-batch-size find what fits",
            code=1,
        )
    except CheckpointSpaceError as err:
        fail(
            f"--output-dir: {err.strerror}; the previous checkpoint is untouched. Free space or choose another "
            "--output-dir, then --resume last",
            code=1,
        )
    except (SIGTERMException, KeyboardInterrupt) as err:
        # KeyboardInterrupt: a second Ctrl-C once Lightning has put the default handlers back, after the save
        stop = next((cb for cb in trainer.callbacks if isinstance(cb, StopOnSignal)), None)  # type: ignore[attr-defined]
        signum = (stop.signum if stop else None) or (
            signal.SIGINT if isinstance(err, KeyboardInterrupt) else signal.SIGTERM
        )
        name = signal.Signals(signum).name
        if trainer.is_global_zero and trainer.state.fn == TrainerFn.TESTING:
            config = Path(cfg.output_dir, "config.yaml")
            print(
                f"stopped by {name} during the final test, which did not finish; training is complete and saved. "
                f"Test it with: python train.py --config {config} --resume last",
                file=sys.stderr,
            )
        elif trainer.is_global_zero:
            saved = f"saved {stop.path}; continue with --resume last" if stop and stop.saved else "nothing to save yet"
            print(f"stopped by {name} at step {trainer.global_step}: {saved}", file=sys.stderr)
        raise SystemExit(128 + signum) from None
