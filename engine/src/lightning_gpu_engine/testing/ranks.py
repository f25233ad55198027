"""`python RANKS_SCRIPT MY_TASK DUMP_DIR PAUSE_STEP ARGS...` (this file, a public name of `testing`): the task of the
file MY_TASK (its TASK) trained with ARGS, and every rank saves DUMP_DIR/rank<N>.pt at the end of fit: its parameters
and metrics, so tests can check that the ranks agree. With PAUSE_STEP > 0 every rank stops after that step's callbacks
(a periodic checkpoint included) and waits to be killed, once rank 0 has printed "paused at step PAUSE_STEP".

A script, not a function: Lightning starts the other local ranks by running this same command line again.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint

from lightning_gpu_engine import train
from lightning_gpu_engine.testing.trainers import trainers_with

RANKS_SCRIPT = Path(__file__)


class DumpRank(Checkpoint):  # Lightning runs checkpoint callbacks last: the pause comes after the periodic save
    """Saves the rank's parameters and metrics at the end of fit; with `pause_step` > 0, waits after that step."""

    def __init__(self, folder: Path, pause_step: int = 0) -> None:
        self.folder, self.pause_step = folder, pause_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if 0 < self.pause_step == trainer.global_step:  # 0: no pause, even where accumulation holds step 0 a while
            if trainer.is_global_zero:
                print(f"paused at step {self.pause_step}", flush=True)
            time.sleep(3600)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        dump = {
            "params": {name: p.detach().clone() for name, p in pl_module.named_parameters()},
            "metrics": {name: float(value) for name, value in trainer.callback_metrics.items()},
            "global_step": trainer.global_step,
            "world_size": trainer.world_size,
            "master_port": os.environ.get("MASTER_PORT"),  # where the ranks met
        }
        torch.save(dump, self.folder / f"rank{trainer.global_rank}.pt")


def load_ranks(folder: Path, world_size: int) -> list[dict[str, Any]]:
    ranks = [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
    assert all(rank["world_size"] == world_size for rank in ranks)
    return ranks


def assert_ranks_agree(ranks: list[dict[str, Any]], val_keys: set[str]) -> None:
    """DDP averages the gradients, so every rank takes the same optimizer steps: equal parameters, bit for bit
    (BatchNorm's running statistics are buffers, not parameters: DDP only broadcasts rank 0's). Validation metrics
    are reduced over all ranks, so they must agree exactly too; `val_keys` are the ones the task logs."""
    first, *others = ranks
    for other in others:
        assert first["global_step"] == other["global_step"]
        assert first["params"].keys() == other["params"].keys()
        for name, value in first["params"].items():
            assert torch.equal(value, other["params"][name]), name
        val = {k: v for k, v in first["metrics"].items() if k.startswith("val/")}
        assert val.keys() == val_keys
        assert val == {k: other["metrics"][k] for k in val}


if __name__ == "__main__":
    program, folder, pause_step = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    spec = importlib.util.spec_from_file_location("my_task", program)
    assert spec is not None and spec.loader is not None
    task = importlib.util.module_from_spec(spec)
    sys.modules["my_task"] = task
    spec.loader.exec_module(task)
    trainers_with(DumpRank(folder, pause_step))
    train(task.TASK, sys.argv[4:])  # train.py's door: its exit leaves the process group before Python's teardown
