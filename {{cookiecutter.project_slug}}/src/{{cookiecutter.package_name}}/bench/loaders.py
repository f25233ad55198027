"""Samples per second out of the real ImageDataModule loader, by data source, decoder, workers and pinned memory.

A sample counts once it is a ready batch on the device: read, decoded, copied and cropped to the training size. That
puts CPU decoding (in the workers) and GPU decoding (workers only read bytes) on the same footing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torchvision.io import write_jpeg

from ..tasks.image_classification.data import SHAPES, ImageDataModule

TIMED_BATCHES = 8
PHOTO_SIZE = (375, 500)  # height, width: ImageNet's typical photo; JPEG quality 90 then gives ~100 KB
Row = dict[str, object]


def worker_counts(cpus: int) -> list[int]:
    """0, then doubling up to all CPUs but one: the default, which issue #11 found needed on a 16-core H100 node."""
    counts = [w for w in (0, 2, 4, 8) if w <= cpus - 1]
    return counts + ([cpus - 1] if cpus - 1 > counts[-1] else [])


def photo(generator: torch.Generator, height: int, width: int) -> torch.Tensor:
    """A photo-like uint8 image: smooth colour regions, mid-frequency texture and sensor noise, so JPEG files have
    the size, and decoding the cost, of real photos (flat synthetic images decode several times faster)."""
    base = F.interpolate(torch.rand(1, 3, 6, 8, generator=generator) * 255, size=(height, width), mode="bicubic")
    texture = torch.randn(1, 3, height // 3, width // 3, generator=generator) * 40
    texture = F.interpolate(texture, size=(height, width), mode="bilinear")
    noise = torch.randn(1, 3, height, width, generator=generator) * 10
    return (base + texture + noise).clamp(0, 255).to(torch.uint8)[0]


def write_photos(root: Path, samples: int, distinct: int = 64, size: tuple[int, int] = PHOTO_SIZE) -> None:
    """`samples` photo-like JPEGs in root/train/<shape>/, and one per class in root/val/.

    Past `distinct` images the files are hard links to earlier ones: the loader still opens and decodes each file,
    and writing thousands of photos would take longer than reading them."""
    generator = torch.Generator().manual_seed(0)
    written: list[Path] = []
    for i in range(min(samples, distinct)):
        folder = root / "train" / SHAPES[i % len(SHAPES)]
        folder.mkdir(parents=True, exist_ok=True)
        written.append(folder / f"{i}.jpg")
        write_jpeg(photo(generator, *size), str(written[-1]), quality=90)
    for i in range(len(written), samples):
        os.link(written[i % len(written)], written[i % len(written)].with_name(f"{i}.jpg"))
    for first in written[: len(SHAPES)]:  # each class train/ has: fewer than all when distinct < len(SHAPES)
        (root / "val" / first.parent.name).mkdir(parents=True, exist_ok=True)
        os.link(first, root / "val" / first.parent.name / "0.jpg")


def ready_batches(data: ImageDataModule, device: torch.device) -> Generator[Any]:  # a Generator, for close()
    """The train loader's batches as the model gets them (evaluation crop: a benchmark has no trainer)."""
    for batch in data.train_dataloader():
        yield data.on_after_batch_transfer(data.transfer_batch_to_device(batch, device, 0), 0)


def samples_per_second(base: ImageDataModule, workers: int, pinned: bool, device: torch.device) -> float:
    """Speed once the pipeline is full: the first `workers + 1` batches, in flight during start-up, are not timed."""
    data = ImageDataModule(**{**base.hparams, "num_workers": workers, "pin_memory": pinned})
    data.datasets = base.datasets  # generated or listed once, shared by every configuration
    batches = ready_batches(data, device)
    for _ in range(workers + 1):
        next(batches)
    start, seen = time.perf_counter(), 0
    for _ in range(TIMED_BATCHES):
        images, _ = next(batches)
        seen += len(images)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    speed = seen / (time.perf_counter() - start)
    batches.close()  # stops the persistent workers
    return speed


def run(
    device: torch.device,
    image_size: int,
    batch_size: int,
    cpus: int,
    workdir: Path,
    on_row: Callable[[Row], None] = lambda row: None,
) -> list[Row]:
    """Synthetic, folder JPEGs decoded by the workers, and (CUDA with TorchCodec) decoded on the GPU; each row goes
    to `on_row` as soon as it is measured."""
    from ..tasks.image_classification.decoding import torchcodec_available

    counts = worker_counts(cpus)
    samples = batch_size * (max(counts) + 1 + TIMED_BATCHES)
    write_photos(workdir / "loader-photos", samples)
    decoders = ["cpu"] + (["gpu"] if device.type == "cuda" and torchcodec_available() else [])
    sources = {"synthetic": ImageDataModule(image_size=image_size, batch_size=batch_size, train_samples=samples)}
    for decode in decoders:
        sources[f"folder {decode}-decode"] = ImageDataModule(
            data="folder",
            data_dir=str(workdir / "loader-photos"),
            image_size=image_size,
            batch_size=batch_size,
            decode=decode,
        )
    rows: list[Row] = []
    for name, base in sources.items():
        base.setup("fit")
        for pinned in (False, True) if device.type == "cuda" else (False,):
            for workers in counts:
                speed = samples_per_second(base, workers, pinned, device)
                rows.append({"data": name, "workers": workers, "pin_memory": pinned, "samples_per_s": speed})
                on_row(rows[-1])
    return rows
