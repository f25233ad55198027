"""Turning the options into Lightning's parts: the Trainer, its callbacks in their order, its strategy and launchers,
the logger, and what counts as a step.

Its `__all__`: the names the front door re-exports from it. Most need torch, so each is imported when first used,
from where the TYPE_CHECKING block below imports it.

Layer 6: imports `config`, `tools`, `checkpoint`, `data`, `perf`, `reliability` and `task`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_gpu_engine.tools.first_use import first_use

if TYPE_CHECKING:  # what type checkers see, and where each name is imported from on first use
    from lightning_gpu_engine.trainer.launchers import launched_as_global_zero
    from lightning_gpu_engine.trainer.trainer import build_trainer, fsdp_units, measuring_trainer

__all__ = ["build_trainer", "fsdp_units", "launched_as_global_zero", "measuring_trainer"]
__getattr__ = first_use(__name__)
