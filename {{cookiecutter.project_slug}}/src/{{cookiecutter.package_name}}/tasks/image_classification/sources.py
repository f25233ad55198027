"""The data sources: generated shapes (no download, learnable in a minute), CIFAR-10's own format, image folders."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from lightning_gpu_engine import ConfigError
from torch import Tensor
from torchvision.io import write_jpeg

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif")  # what decoding.decode_rgb reads
PHOTO_SIZE = (375, 500)  # height, width: ImageNet's typical photo; JPEG quality 90 then gives ~100 KB
SHAPES = ("circle", "square", "triangle", "cross", "ring", "diamond")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def make_shapes(n: int, size: int, seed: int) -> tuple[Tensor, Tensor]:
    """`n` noisy images of one random shape each, labelled by shape; the same seed gives the same images."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(SHAPES), n)
    images = np.empty((n, 3, size, size), dtype=np.uint8)
    grid = (np.arange(size) + 0.5) / size
    for start in range(0, n, 512):  # chunks bound the memory of the per-pixel masks
        m = min(512, n - start)
        r = rng.uniform(0.2, 0.36, m)[:, None, None]
        cy, cx = (rng.uniform(r[:, 0, 0], 1 - r[:, 0, 0])[:, None, None] for _ in range(2))
        dy, dx = (grid[None, :, None] - cy) / r, (grid[None, None, :] - cx) / r
        ay, ax, d2 = np.abs(dy), np.abs(dx), dx**2 + dy**2
        masks = np.stack(
            [
                d2 <= 1.0,
                np.maximum(ax, ay) <= 0.8,
                (dy <= 0.75) & (ax <= (dy + 0.95) / 1.7),
                ((ax <= 0.28) & (ay <= 1.0)) | ((ay <= 0.28) & (ax <= 1.0)),
                (d2 <= 1.0) & (d2 >= 0.45),
                ax + ay <= 1.0,
            ]
        )
        mask = masks[labels[start : start + m], np.arange(m)][:, None]
        background = rng.uniform(0, 255, (m, 3, 1, 1))
        shift = rng.uniform(70, 130, (m, 3, 1, 1))
        foreground = np.where(background > 127, background - shift, background + shift)
        pixels = np.where(mask, foreground, background) + rng.normal(0, 18, (m, 3, size, size))
        images[start : start + m] = np.clip(pixels, 0, 255).astype(np.uint8)
    return torch.from_numpy(images), torch.from_numpy(labels)


def read_cifar10(root: Path, train: bool) -> tuple[Tensor, Tensor]:
    """CIFAR-10 from its own python-pickle format, the files torchvision's download unpacks."""
    folder = root / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
    images, labels = [], []
    for name in names:
        try:
            with open(folder / name, "rb") as fh:
                batch = pickle.load(fh, encoding="latin1")
            images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            labels.append(np.asarray(batch["labels"], dtype=np.int64))
            if len(labels[-1]) != len(images[-1]) or not np.isin(labels[-1], range(len(CIFAR10_CLASSES))).all():
                raise ValueError(f"{len(images[-1])} images but {len(labels[-1])} labels from 0 to 9")
        # A cut-off or overwritten pickle fails in whichever way its bytes lead the unpickler: any error means damage.
        except Exception as err:
            what = "is missing" if isinstance(err, FileNotFoundError) else f"is damaged ({type(err).__name__}: {err})"
            raise ConfigError(
                "data_dir",
                f"{folder / name} {what}; delete {folder} and run again with a network connection to download "
                "CIFAR-10 afresh, or copy an intact cifar-10-batches-py/ there",
            ) from None
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def is_image(path: str) -> bool:
    return path.lower().endswith(IMAGE_SUFFIXES)


def list_images(folder: Path) -> tuple[list[str], list[str]]:
    """The images under `folder` at any depth, in ImageFolder's order, each real folder listed once; and the folders
    skipped because a symlink leads back to a folder already listed or above it (a loop would otherwise repeat every
    image in it until the path grows too long for the system: 41 times on Linux)."""
    top = os.path.realpath(folder)
    listed: set[str] = set()
    found: list[tuple[str, list[str]]] = []
    skipped: list[str] = []
    for where, folders, files in os.walk(folder, followlinks=True):
        folders.sort()  # which of two links to one folder is listed must not depend on the directory's order
        real = os.path.realpath(where)
        # a link to the class folder or above it would list it again inside itself, and other classes under it
        if real in listed or (listed and os.path.commonpath([real, top]) == real):
            skipped.append(where)
            folders.clear()
            continue
        listed.add(real)
        found.append((where, sorted(name for name in files if is_image(name))))
    return [os.path.join(where, name) for where, names in sorted(found) for name in names], skipped


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
