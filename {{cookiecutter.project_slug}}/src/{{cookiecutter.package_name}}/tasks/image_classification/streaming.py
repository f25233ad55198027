"""--data streaming for images: prepare_data.py writes a folder's files, bytes as they are, into LitData chunks; a run
decodes them through the same --decode path as files (CPU workers, or nvJPEG on the device)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from lightning_gpu_engine import (
    StreamedItems,
    chunks_output,
    parse_chunk_bytes,
    write_chunks,
)
from torch import Tensor

from .config import PrepareOptions
from .decoding import UnreadableImageError
from .images import ImageFiles
from .inputs import class_folders

TASK_NAME = "image-classification"


def image_item(sample: tuple[str, int]) -> dict[str, Any]:
    """One image file's bytes, undecoded (smaller than pixels, and --decode decides where to decode), and its label."""
    path, label = sample
    return {"image": Path(path).read_bytes(), "label": label}


def prepare(opts: PrepareOptions) -> dict[str, int]:
    from .data import image_folders

    root = Path(opts.data_dir)
    classes = class_folders(root)
    with chunks_output(opts.output) as output:  # a bad --output answers before the images are listed
        samples = image_folders(root, classes, "decoded")
        splits = {split: list(zip(*pair, strict=True)) for split, pair in samples.items()}
        made_by = {"task": TASK_NAME, "classes": classes}
        write_chunks(image_item, splits, output, made_by, opts.num_workers, parse_chunk_bytes(opts.chunk_bytes))
    return {split: len(items) for split, items in splits.items()}


class StreamedImages(ImageFiles):
    """A split's images from chunks, as ImageFiles gives files: decoded here, or bytes for the device, and an image
    no decoder can read is skipped with a warning for the next one."""

    def __init__(self, items: StreamedItems, mode: str, max_side: int = 0) -> None:
        super().__init__([], mode=mode, max_side=max_side)
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        for i in (j % len(self) for j in range(index, index + len(self))):
            item = self.items[i]
            try:
                return self._decode(torch.frombuffer(bytearray(item["image"]), dtype=torch.uint8)), int(item["label"])
            except (UnreadableImageError, OSError) as err:
                warnings.warn(f"skipping unreadable image {i} of {self.items.url}: {err}", stacklevel=2)
        raise UnreadableImageError(f"none of the {len(self)} images of {self.items.url} can be read")
