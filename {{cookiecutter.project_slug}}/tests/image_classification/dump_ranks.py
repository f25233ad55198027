"""`python tests/image_classification/dump_ranks.py DUMP_DIR TRAIN_ARGS...`: train.py, and every rank saves
DUMP_DIR/rank<N>.pt.

Each file holds that rank's parameters and metrics at the end of fit, so tests can check that the ranks agree. Run as a
script because Lightning starts the other local ranks by re-running this same command line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning as L
from lightning_gpu_engine.trainer import trainer as trainer_module
from lightning_gpu_engine.testing.ranks import DumpRank

import train

if __name__ == "__main__":
    folder, build_callbacks = Path(sys.argv[1]), trainer_module.build_callbacks

    def with_dump(*args: Any, **kwargs: Any) -> list[L.Callback]:
        return [*build_callbacks(*args, **kwargs), DumpRank(folder)]

    trainer_module.build_callbacks = with_dump
    train.cli(sys.argv[2:])  # train.py's door, its exit included
