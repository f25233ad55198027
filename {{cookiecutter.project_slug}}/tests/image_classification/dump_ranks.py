"""`python tests/image_classification/dump_ranks.py DUMP_DIR TRAIN_ARGS...`: train.py, and every rank saves
DUMP_DIR/rank<N>.pt.

Each file holds that rank's parameters and metrics at the end of fit, so tests can check that the ranks agree. Run as a
script because Lightning starts the other local ranks by re-running this same command line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lightning_gpu_engine.testing import DumpRank, trainers_with

import train

if __name__ == "__main__":
    trainers_with(DumpRank(Path(sys.argv[1])))
    train.main(sys.argv[2:])  # train.py's door, its exit included
