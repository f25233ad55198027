"""What a checkpoint keeps of a metric: the rank's own running state, never a synced or cached value."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from lightning_gpu_engine.reliability.metric_state import (
    States,
    load_metric_states,
    metric_states,
)


class Accuracy(nn.Module):
    """A module holding one metric, updated once."""

    def __init__(self, predictions: list[int], targets: list[int]) -> None:
        super().__init__()
        self.acc = MulticlassAccuracy(3, average="micro")
        self.acc.update(torch.tensor(predictions), torch.tensor(targets))


def counts(states: States) -> dict[str, int]:
    return {name: int(value) for name, value in states["acc"].items()}


def test_a_save_inside_a_ddp_sync_keeps_the_ranks_own_state_and_a_restore_drops_the_cached_value() -> None:
    module = Accuracy([0, 1, 2, 2], [0, 1, 1, 0])
    own = metric_states(module)
    assert float(module.acc.compute()) == 0.5  # and cached

    # as within compute() under DDP: the attributes hold the totals of all (here two alike) ranks
    def two_ranks(tensor: Tensor, group: object = None) -> list[Tensor]:
        return [tensor, tensor]

    module.acc.sync(dist_sync_fn=two_ranks, distributed_available=lambda: True)
    assert module.acc.tp == 2 * own["acc"]["tp"]
    assert counts(metric_states(module)) == counts(own) == {"tp": 2, "fp": 2, "tn": 6, "fn": 2, "_update_count": 1}
    module.acc.unsync()

    load_metric_states(module, metric_states(Accuracy([0, 1, 2, 2], [0, 1, 2, 2])))
    assert float(module.acc.compute()) == 1.0
