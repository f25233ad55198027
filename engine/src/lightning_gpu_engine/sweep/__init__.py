"""Hyperparameter search on Optuna, every trial a real run of the task's script with its resume and signals, for a
project's sweep.py to import from here.

Layer 11: imports `lightning_gpu_engine` and `bench`.
"""

from lightning_gpu_engine.sweep.run import main
from lightning_gpu_engine.sweep.space import load_space

__all__ = ["load_space", "main"]
