"""Surviving stops: exact resume with the epoch's metrics, preemption, nan and out-of-memory guards, and the changes a
resume may make.

Its `__all__`: the names the front door re-exports from it. Most need torch, so each is imported when first used,
from where the TYPE_CHECKING block below imports it.

Layer 5: imports `config`, `tools`, `checkpoint`, `data`, `module` and `task`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_gpu_engine.tools.first_use import first_use

if TYPE_CHECKING:  # what type checkers see, and where each name is imported from on first use
    from lightning_gpu_engine.reliability.guards import check_enough_data

__all__ = ["check_enough_data"]
__getattr__ = first_use(__name__)
