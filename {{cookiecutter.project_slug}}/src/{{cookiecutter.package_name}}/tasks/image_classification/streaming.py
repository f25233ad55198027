"""--data streaming for images: prepare_data.py writes a folder's files, bytes as they are, into LitData chunks; a run
decodes them through the same --decode path as files (CPU workers, or nvJPEG on the device)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning_gpu_engine import (
    ConfigError,
    StreamedItems,
    check_path,
    chunks_output,
    opt,
    parse_chunk_bytes,
    write_chunks,
)
from torch import Tensor

from .decoding import UnreadableImageError
from .images import ImageFiles

TASK_NAME = "image-classification"


@dataclass
class PrepareOptions:
    data_dir: str = opt("data", "the image folder: train/ and val/ [and test/], one folder per class in each")
    output: str = opt("chunks", "a local folder or s3://bucket/prefix (AWS_ENDPOINT_URL for other S3 servers)")
    chunk_bytes: str = opt("64MB", "target chunk size, with its unit (KB, MB, GB): LitData's advice; read by ranges")
    num_workers: int = opt(0, "writer processes; 0 = in this process (a few thousand images a second)")

    def __post_init__(self) -> None:
        for name in ("data_dir", "output"):
            check_path(name, getattr(self, name))
        if self.num_workers < 0:
            raise ConfigError("num_workers", f"must be 0 or more, got {self.num_workers}")
        parse_chunk_bytes(self.chunk_bytes)


def image_item(sample: tuple[str, int]) -> dict[str, Any]:
    """One image file's bytes, undecoded (smaller than pixels, and --decode decides where to decode), and its label."""
    path, label = sample
    return {"image": Path(path).read_bytes(), "label": label}


def prepare(opts: PrepareOptions) -> dict[str, int]:
    from .data import image_folders

    root = Path(opts.data_dir)
    if not (root / "train").is_dir() or not (root / "val").is_dir():
        raise ConfigError("data_dir", f"{root} needs train/ and val/ class folders")
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    if len(classes) < 2:
        raise ConfigError("data_dir", f"{root}/train/ needs at least 2 class folders, found {classes}")
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
