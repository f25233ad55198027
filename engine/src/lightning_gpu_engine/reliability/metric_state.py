"""Epoch metrics that survive a mid-epoch stop: the running state of every torchmetrics metric goes in checkpoints.

torchmetrics leaves a metric's running state (counts, sums, lists of predictions) out of `state_dict` by default, so
a run resumed mid-epoch would report the epoch's accuracy over the steps after the resume only. `MetricStateResume`
saves the state of every `torchmetrics.Metric` in the LightningModule, whatever the task, and puts it back when the
resumed run continues the epoch the state was saved in.

Under DDP each rank accumulates its own share of the epoch until `compute` syncs them, and only rank 0 writes the
checkpoint: the states of all ranks are gathered into it, and each rank takes its own back.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from torchmetrics import Metric

KEY = "metric_states"
UPDATES = "_update_count"  # saved next to the states: compute() warns on a metric it thinks was never updated

States = dict[str, dict[str, Any]]  # metric name -> state name -> tensor, or list of tensors for "cat" states


def metric_states(module: nn.Module, leave_out: Collection[str] = ()) -> States:
    """This process's running state of every metric in `module`, on the CPU, by module name."""
    states: States = {}
    for name, metric in module.named_modules():
        if not isinstance(metric, Metric) or name in leave_out:
            continue
        # Within a compute under DDP the attributes hold all ranks' totals; the rank's own state is cached aside.
        values = metric._cache if metric._is_synced and metric._cache is not None else metric.metric_state
        states[name] = {attr: _to(value, torch.device("cpu")) for attr, value in values.items()}
        states[name][UPDATES] = metric.update_count
    return states


def load_metric_states(module: nn.Module, states: States) -> None:
    for name, metric in module.named_modules():
        saved = states.get(name)
        if not isinstance(metric, Metric) or saved is None or saved.keys() != {*metric._defaults, UPDATES}:
            continue  # a metric that is new, or has other states than when it was saved, starts afresh
        for attr in metric._defaults:
            setattr(metric, attr, _to(saved[attr], metric.device))
        metric._update_count = saved[UPDATES]
        metric._computed = None  # a value cached before the restore would hide the restored state


def _to(value: Tensor | list[Tensor], device: torch.device) -> Tensor | list[Tensor]:
    return [v.detach().to(device) for v in value] if isinstance(value, list) else value.detach().to(device)


def gather(trainer: L.Trainer, states: States) -> list[States]:
    """Every rank's states, indexed by global rank; a collective, as Lightning's own barrier in a save is."""
    if trainer.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
        return [states]
    ranks: list[Any] = [None] * trainer.world_size
    dist.all_gather_object(ranks, states)
    return ranks


class MetricStateResume(Callback):
    """Saves every rank's metric states with each checkpoint; a resumed run takes them back at its first step.

    Only if that step is in the epoch they were saved in: a checkpoint taken once an epoch's batches are done holds
    that whole epoch's training counts, and Lightning resumes from it into the next epoch, or ends the epoch without
    computing or resetting metrics that the resumed process has not logged yet; either way they would be counted into
    the next epoch. Metrics that a running validation is accumulating are left out: Lightning resets them as it ends,
    and a run resumed from inside it does not go on with it where it stopped.
    """

    def __init__(self) -> None:
        self._saved: dict[str, Any] | None = None
        self._counts_at_validation_start: dict[str, int] = {}

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._counts_at_validation_start = {name: m.update_count for name, m in _metrics(pl_module)}

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._saved is not None:  # saved again before the first step (a stop in the sanity check): still to restore
            checkpoint[KEY] = self._saved
            return
        leave_out = set()
        if trainer.validating or trainer.sanity_checking:
            before = self._counts_at_validation_start
            leave_out = {name for name, m in _metrics(pl_module) if m.update_count != before.get(name, 0)}
        ranks = gather(trainer, metric_states(pl_module, leave_out))
        checkpoint[KEY] = {"epoch": trainer.current_epoch, "ranks": ranks}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._saved = checkpoint.get(KEY)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._saved is None:
            return
        saved, self._saved = self._saved, None
        if saved["epoch"] != trainer.current_epoch:
            return
        if len(saved["ranks"]) != trainer.world_size:  # the data is shared out otherwise: no rank's state fits
            rank_zero_warn(
                f"the checkpoint was saved by {len(saved['ranks'])} ranks and this run has {trainer.world_size}: "
                "this epoch's metrics count from the resumed step on only"
            )
            return
        load_metric_states(pl_module, saved["ranks"][trainer.global_rank])


def _metrics(module: nn.Module) -> list[tuple[str, Metric]]:
    return [(name, m) for name, m in module.named_modules() if isinstance(m, Metric)]
