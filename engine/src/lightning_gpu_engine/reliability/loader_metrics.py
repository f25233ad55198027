"""Each evaluation loader's own metric values, where a module logs one torchmetrics metric from several loaders."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from torchmetrics import Metric


class SeparateLoaderMetrics(Callback):
    """A torchmetrics metric logged from two validation (or test) loaders under each loader's key (`val/acc`, which
    Lightning names `val/acc/dataloader_idx_0` and `..._1`) is one object: Lightning computes the first loader's value
    when that loader ends, but never resets the object, so the second loader's value counted both loaders' batches
    (Lightning #18282), and which loader came first changed it. As a loader ends, once Lightning has computed its
    values, the metrics it was logged with are reset; one also logged for every loader under one key
    (`add_dataloader_idx=False`, a value over all of them) is left to accumulate."""

    def __init__(self) -> None:
        self._loader = 0

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._loader = 0

    on_test_epoch_start = on_validation_epoch_start

    def on_validation_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if dataloader_idx != self._loader:  # Lightning stored the ended loader's values as this one's batch came
            ended, self._loader = self._loader, dataloader_idx
            for metric in loader_metrics(trainer, ended):
                metric.reset()

    on_test_batch_start = on_validation_batch_start


def loader_metrics(trainer: L.Trainer, loader: int) -> list[Metric]:
    """The torchmetrics metrics logged from `loader` under its own key alone."""
    results = trainer._results
    logged = [item for item in (results.values() if results is not None else ()) if not item.is_tensor]
    over_all = {id(item.value) for item in logged if not item.meta.add_dataloader_idx}
    own = {id(item.value): item.value for item in logged if item.meta.dataloader_idx == loader}
    return [metric for key, metric in own.items() if key not in over_all]
