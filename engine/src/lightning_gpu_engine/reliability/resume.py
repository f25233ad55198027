"""Stop at any step and continue bit for bit, on one device or many.

Lightning's checkpoints hold the weights, optimizer, scheduler and loop counters. Two things are added here:
- where the train loader was in its epoch (`ResumableLoader`: the order depends only on seed and epoch, and the
  batches already trained on are skipped as indices, without reading their images),
- the random generators behind the on-device augmentation and any dropout (`ExactResume`, which also restores the
  loader's position),
"""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from lightning_gpu_engine.data.loaders import ResumableLoader


def rng_state() -> dict[str, Any]:
    """torch's (CPU and current GPU), NumPy's and Python's generators, as tensors and plain values only."""
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)  # type: ignore[misc]
    state = {
        "torch": torch.get_rng_state(),
        "numpy": (name, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, gauss),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class ExactResume(Callback):
    """Puts the random generators and the train loader's position in checkpoints, and restores both at train start.

    Lightning leaves the generators out, so a resumed run would draw other crops, flips and dropout masks. It does
    save a stateful loader's position, but drops it on resume when `configure_optimizers` reads
    `trainer.estimated_stepping_batches`, as ours does (Lightning issue #20550); restoring it here works either way.
    Train start comes after the sanity check has drawn from the generators and before the first batch is read.
    Under DDP every rank starts from the same seed and draws alike, so rank 0's state stands for all.
    """

    def __init__(self) -> None:
        self._saved: dict[str, Any] | None = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        loader = trainer.train_dataloader
        position = loader.state_dict() if isinstance(loader, ResumableLoader) else None
        version = trainer.logger.version if trainer.logger is not None else None  # continued by a resumed run
        checkpoint["exact_resume"] = {
            "rng": rng_state(),
            "train_loader": position,
            "logger_version": version,
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._saved = checkpoint.get("exact_resume")
        continue_the_cut_epoch(checkpoint)  # Lightning restores the loops from this dict after this hook
        start_the_next_epoch(trainer, checkpoint)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.fit_loop.__dict__.pop("_iteration_based_training", None)  # the restore is over (start_the_next_epoch)
        if self._saved is None:
            return
        saved, self._saved = self._saved, None
        set_rng_state(saved["rng"])
        loader = trainer.train_dataloader
        if isinstance(loader, ResumableLoader) and saved["train_loader"] is not None:
            loader.load_state_dict(saved["train_loader"])


def continue_the_cut_epoch(checkpoint: dict[str, Any]) -> None:
    """A run that reached --max-steps inside an epoch is saved as if that epoch had ended: Lightning runs the epoch's
    end there. Resumed with a larger --max-steps it would then start the next epoch, skipping the rest of this one, or
    with --max-epochs 1 train nothing. Its epoch counters are set back to those of a save inside the epoch (after a
    validation), so the epoch goes on from the batch where it stopped."""
    fit = (checkpoint.get("loops") or {}).get("fit_loop")
    if not fit or fit["epoch_loop.batch_progress"]["is_last_batch"]:
        return
    epochs = fit["epoch_progress"]
    for counts in (epochs["total"], epochs["current"]):
        if not counts["ready"] == counts["started"] == counts["processed"] == counts["completed"] + 1:
            return  # not saved at an epoch's end
    for counts in (epochs["total"], epochs["current"]):
        counts["processed"] -= 1


def start_the_next_epoch(trainer: L.Trainer, checkpoint: dict[str, Any]) -> None:
    """A checkpoint saved once an epoch's training had ended starts the next epoch, whatever the budget.

    Two saves are taken there: the epoch end's (its `on_train_epoch_end`), and a stop's in the epoch's last batch,
    which Lightning raises after the epoch's end (its counters say the epoch completed). On --max-epochs alone
    Lightning starts the next epoch from either. With --max-steps it restarts its loops regardless (Lightning
    #19617): the ended epoch is run once more with no batch left in it, counted again, and every later epoch is
    shuffled as the one after it, in silence. Lightning decides that as it restores the loops, after this hook and
    before any other, by asking whether training counts in steps; here it is told no, until training starts."""
    fit = (checkpoint.get("loops") or {}).get("fit_loop")
    if not fit:
        return
    epochs = fit["epoch_progress"]["total"]
    if epochs["ready"] == epochs["started"] == epochs["processed"]:  # the epoch's batches, and its end, are done
        trainer.fit_loop._iteration_based_training = lambda: False  # type: ignore[method-assign]
