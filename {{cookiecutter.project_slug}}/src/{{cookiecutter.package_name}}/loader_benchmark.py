"""Samples per second out of the real ImageDataModule loader, by data source, worker count and pinned memory.

With CUDA each batch is also copied to the GPU, because that copy is what pinned memory speeds up.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import torch
from torchvision.io import write_jpeg

from .data import SHAPES, ImageDataModule, make_shapes

TIMED_BATCHES = 8


def worker_counts(cpus: int) -> list[int]:
    return [w for w in (0, 2, 4, 8) if w <= cpus]


def write_jpegs(root: Path, samples: int, size: int, distinct: int = 512) -> None:
    """`samples` JPEGs of the synthetic shapes in root/train/<shape>/, plus the val/ split the DataModule insists on.

    Past `distinct` images the files are hard links to earlier ones: the loader still opens and decodes each file,
    and writing thousands of large JPEGs would take longer than reading them."""
    written: list[Path] = []
    for start in range(0, min(samples, distinct), 64):  # 64 at a time: large images take memory to draw
        images, labels = make_shapes(min(64, distinct - start), size, seed=start)
        for image, label in zip(images, labels.tolist(), strict=True):
            folder = root / "train" / SHAPES[label]
            folder.mkdir(parents=True, exist_ok=True)
            written.append(folder / f"{len(written)}.jpg")
            write_jpeg(image, str(written[-1]), quality=90)
    for i in range(len(written), samples):
        os.link(written[i % len(written)], written[i % len(written)].with_name(f"{i}.jpg"))
    for folder in (root / "train").iterdir():
        (root / "val" / folder.name).mkdir(parents=True)
        shutil.copy(next(folder.iterdir()), root / "val" / folder.name)


def samples_per_second(base: ImageDataModule, workers: int, pinned: bool, device: torch.device) -> float:
    """Speed once the pipeline is full: the first `workers + 1` batches, in flight during start-up, are not timed."""
    hp = base.hparams
    data = ImageDataModule(
        data=hp["data"],
        data_dir=hp["data_dir"],
        image_size=hp["image_size"],
        batch_size=hp["batch_size"],
        num_workers=workers,
        pin_memory=pinned,
        train_samples=hp["train_samples"],
    )
    data.datasets = base.datasets  # generated or listed once, shared by every configuration
    loader = data.train_dataloader()
    batches = iter(loader)
    for _ in range(workers + 1):
        next(batches)
    start, seen = time.perf_counter(), 0
    for _ in range(TIMED_BATCHES):
        images, labels = next(batches)
        if device.type == "cuda":
            images.to(device, non_blocking=pinned)
            labels.to(device, non_blocking=pinned)
        seen += len(images)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    speed = seen / (time.perf_counter() - start)
    del batches, loader  # stops the persistent workers
    return speed


def run(device: torch.device, image_size: int, batch_size: int, cpus: int, workdir: Path) -> list[dict[str, object]]:
    counts = worker_counts(cpus)
    samples = batch_size * (max(counts) + 1 + TIMED_BATCHES)
    # JPEGs at twice the training size, as photos are larger than what the network sees (ImageNet's average is
    # about 400 x 350 px for 224 px training), so decoding and resizing cost what they cost in real use.
    write_jpegs(workdir / "jpegs", samples, 2 * image_size)
    sources = {
        "synthetic": ImageDataModule(image_size=image_size, batch_size=batch_size, train_samples=samples),
        "folder": ImageDataModule(
            data="folder", data_dir=str(workdir / "jpegs"), image_size=image_size, batch_size=batch_size
        ),
    }
    rows: list[dict[str, object]] = []
    for name, base in sources.items():
        base.setup("fit")
        for pinned in (False, True) if device.type == "cuda" else (False,):
            for workers in counts:
                speed = samples_per_second(base, workers, pinned, device)
                rows.append({"data": name, "workers": workers, "pin_memory": pinned, "samples_per_s": speed})
    return rows
