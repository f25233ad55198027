"""Writing and reading checkpoints: atomic single files and sharded folders, when they are saved and after which hooks,
their mirror on object storage, and the checks before a resume.

Its `__all__`: the names the front door re-exports from it. Most need torch, so each is imported when first used,
from where the TYPE_CHECKING block below imports it.

Layer 2: imports `config` and `tools`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_gpu_engine.tools.first_use import first_use

if TYPE_CHECKING:  # what type checkers see, and where each name is imported from on first use
    from lightning_gpu_engine.checkpoint.checks import check_checkpoint, read_checkpoint

__all__ = ["check_checkpoint", "read_checkpoint"]
__getattr__ = first_use(__name__)
