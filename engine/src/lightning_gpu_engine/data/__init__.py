"""The loaders a task's DataModule builds on: resumable training batches, evaluation that counts each sample once, and
LitData chunks streamed from disk or S3.

Its `__all__`: the names the front door re-exports from it. Most need torch, so each is imported when first used,
from where the TYPE_CHECKING block below imports it.

Layer 2: imports `config` and `tools`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_gpu_engine.tools.first_use import first_use

if TYPE_CHECKING:  # what type checkers see, and where each name is imported from on first use
    from lightning_gpu_engine.data.loaders import eval_loader, train_loader
    from lightning_gpu_engine.data.streaming import StreamedItems, read_made_by
    from lightning_gpu_engine.data.streaming_write import chunks_output, parse_chunk_bytes, write_chunks

__all__ = [
    "StreamedItems",
    "chunks_output",
    "eval_loader",
    "parse_chunk_bytes",
    "read_made_by",
    "train_loader",
    "write_chunks",
]
__getattr__ = first_use(__name__)
