"""Images in, uint8 batches out; float conversion, augmentation and layout happen on the device.

Sending uint8 moves four times fewer bytes to the GPU than float32, and doing the per-pixel work there keeps the CPU
loader from being the bottleneck.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms.v2 import functional as TF

from .config import ConfigError

SHAPES = ("circle", "square", "triangle", "cross", "ring", "diamond")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
Batch = tuple[Tensor, Tensor]


def make_shapes(n: int, size: int, seed: int) -> tuple[Tensor, Tensor]:
    """`n` noisy images of one random shape each, labelled by shape; the same seed gives the same images."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(SHAPES), n)
    images = np.empty((n, 3, size, size), dtype=np.uint8)
    grid = (np.arange(size) + 0.5) / size
    for start in range(0, n, 512):  # chunks bound the memory of the per-pixel masks
        m = min(512, n - start)
        r = rng.uniform(0.18, 0.34, m)[:, None, None]
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
        with open(folder / name, "rb") as fh:
            batch = pickle.load(fh, encoding="latin1")
        images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.extend(batch["labels"])
    return torch.from_numpy(np.concatenate(images)), torch.tensor(labels)


def _read_rgb(path: str) -> Tensor:
    return decode_image(path, mode=ImageReadMode.RGB)


class ImageFolderUint8(torchvision.datasets.ImageFolder):
    """Your `class_name/image.jpg` folders, decoded and resized to uint8 `size x size` on the CPU."""

    def __init__(self, root: Path, size: int) -> None:
        super().__init__(str(root), loader=_read_rgb)
        self.size = size

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        image, label = super().__getitem__(index)
        return TF.resize(image, [self.size, self.size], antialias=True), label


def random_crop_flip(x: Tensor, pad: int) -> Tensor:
    """Per-sample random crop from a reflect-padded batch, then a random horizontal flip, all on x's device."""
    n, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    top, left = (torch.randint(0, 2 * pad + 1, (n, 1), device=x.device) for _ in range(2))
    rows = (top + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (left + torch.arange(w, device=x.device))[:, None, None, :]
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    channel = torch.arange(c, device=x.device)[None, :, None, None]
    x = padded[batch, channel, rows, cols]
    flip = torch.rand(n, 1, 1, 1, device=x.device) < 0.5
    return torch.where(flip, x.flip(-1), x)


class ImageDataModule(L.LightningDataModule):
    def __init__(
        self,
        data: str = "synthetic",
        data_dir: str = "data",
        image_size: int = 64,
        batch_size: int = 128,
        num_workers: int = 0,
        pin_memory: bool = False,
        channels_last: bool = True,
        train_samples: int = 10_000,
        seed: int = 42,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.root = Path(data_dir)
        self.datasets: dict[str, Dataset[Any]] = {}
        if data == "folder":
            if not (self.root / "train").is_dir() or not (self.root / "val").is_dir():
                raise ConfigError(
                    "data_dir", f"folder data needs {self.root}/train/ and {self.root}/val/ class folders"
                )
            self.classes = sorted(p.name for p in (self.root / "train").iterdir() if p.is_dir())
        else:
            self.classes = list(SHAPES) if data == "synthetic" else list(CIFAR10_CLASSES)
        if len(self.classes) < 2:
            raise ConfigError("data_dir", f"{self.root}/train/ needs at least 2 class folders, found {self.classes}")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def prepare_data(self) -> None:
        # Runs on one process per node, so parallel ranks never download over each other.
        if self.hparams["data"] == "cifar10" and not (self.root / "cifar-10-batches-py").is_dir():
            torchvision.datasets.CIFAR10(str(self.root), train=True, download=True)

    def setup(self, stage: str) -> None:
        if self.datasets:
            return
        hp = self.hparams
        if hp["data"] == "synthetic":
            n_eval = max(1, hp["train_samples"] // 5)
            for offset, split in enumerate(("train", "val", "test")):
                n = hp["train_samples"] if split == "train" else n_eval
                self.datasets[split] = TensorDataset(*make_shapes(n, hp["image_size"], hp["seed"] + offset))
        elif hp["data"] == "cifar10":
            images, labels = read_cifar10(self.root, train=True)
            order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(hp["seed"]))
            n_val = len(labels) // 10
            self.datasets["val"] = TensorDataset(images[order[:n_val]], labels[order[:n_val]])
            self.datasets["train"] = TensorDataset(images[order[n_val:]], labels[order[n_val:]])
            self.datasets["test"] = TensorDataset(*read_cifar10(self.root, train=False))
        else:
            for split in ("train", "val", "test"):
                folder = self.root / (split if (self.root / split).is_dir() else "val")
                self.datasets[split] = ImageFolderUint8(folder, hp["image_size"])

    def _loader(self, split: str) -> DataLoader[Batch]:
        workers = self.hparams["num_workers"]
        return DataLoader(
            self.datasets[split],
            batch_size=self.hparams["batch_size"],
            shuffle=split == "train",
            drop_last=split == "train",  # static shapes: no recompile, no cuDNN re-tune, no tiny last step
            num_workers=workers,
            pin_memory=self.hparams["pin_memory"],
            persistent_workers=workers > 0,  # no worker restart cost at every epoch and validation
        )

    def train_dataloader(self) -> DataLoader[Batch]:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader[Batch]:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader[Batch]:
        return self._loader("test")

    def on_after_batch_transfer(self, batch: Batch, dataloader_idx: int) -> Batch:
        x, y = batch
        size = self.hparams["image_size"]
        x = x.float()
        if x.shape[-2:] != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        if self.trainer is not None and self.trainer.training:
            x = random_crop_flip(x, pad=max(1, size // 8))
        mean = torch.tensor(MEAN, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(STD, device=x.device).view(1, 3, 1, 1)
        x = (x - mean) / std
        if self.hparams["channels_last"]:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y
