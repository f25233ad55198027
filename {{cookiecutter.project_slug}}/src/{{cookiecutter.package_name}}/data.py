"""Images in, uint8 batches out; float conversion, augmentation and layout happen on the device.

Sending uint8 moves four times fewer bytes to the GPU than float32, and doing the per-pixel work there keeps the CPU
loader from being the bottleneck.
"""

from __future__ import annotations

import functools
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms.v2 import functional as TF

from .config import ConfigError
from .resume import EpochShuffle, ResumableLoader, SkippingBatchSampler, ignore_stop_signals

SHAPES = ("circle", "square", "triangle", "cross", "ring", "diamond")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif")  # what torchvision.io.decode_image reads
Batch = tuple[Tensor, Tensor]


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
        with open(folder / name, "rb") as fh:
            batch = pickle.load(fh, encoding="latin1")
        images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.extend(batch["labels"])
    return torch.from_numpy(np.concatenate(images)), torch.tensor(labels)


def _is_image(path: str) -> bool:
    return path.lower().endswith(IMAGE_SUFFIXES)


def _read_rgb(path: str) -> Tensor:
    return decode_image(path, mode=ImageReadMode.RGB)


def check_image_folders(root: Path, classes: list[str]) -> None:
    """Refuse at start what ImageFolder would fail on mid-run, or silently mislabel: mismatched or empty classes."""
    splits = [split for split in ("train", "val", "test") if (root / split).is_dir()]
    for split in splits[1:]:
        found = sorted(p.name for p in (root / split).iterdir() if p.is_dir())
        if found != classes:
            raise ConfigError("data_dir", f"{root}/{split}/ has class folders {found}, but train/ has {classes}")
    for folder in (root / split / name for split in splits for name in classes):
        if not any(_is_image(str(p)) for p in folder.iterdir()):
            raise ConfigError("data_dir", f"no images in {folder}/; each class needs some {'/'.join(IMAGE_SUFFIXES)}")


class ImageFolderUint8(torchvision.datasets.ImageFolder):
    """Your `class_name/image.jpg` folders, decoded and resized to uint8 `size x size` on the CPU."""

    def __init__(self, root: Path, size: int) -> None:
        super().__init__(str(root), loader=_read_rgb, is_valid_file=_is_image)
        self.size = size

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        # An unreadable file is skipped with a warning naming it, and the next image takes its place so that batch
        # shapes stay fixed: one bad file in a million should not end a run hours in.
        for i in (j % len(self) for j in range(index, index + len(self))):
            try:
                image, label = super().__getitem__(i)
            except RuntimeError as err:
                reason = re.sub(r"^\w+, \S+:\d+, ", "", str(err).strip())  # drop the C++ source location
                warnings.warn(f"skipping unreadable image {self.samples[i][0]}: {reason}", stacklevel=2)
                continue
            return TF.resize(image, [self.size, self.size], antialias=True), label
        raise ConfigError("data_dir", f"none of the images in {self.root} can be read")


@functools.cache
def _normalization(device: torch.device) -> tuple[Tensor, Tensor]:
    """Made once per device: a tensor made from Python numbers on a GPU is a copy that waits for the GPU to finish."""
    return torch.tensor(MEAN, device=device).view(1, 3, 1, 1), torch.tensor(STD, device=device).view(1, 3, 1, 1)


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
        self.datasets: dict[str, TensorDataset | ImageFolderUint8] = {}
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
        if data == "folder":
            check_image_folders(self.root, self.classes)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def prepare_data(self) -> None:
        # Runs on one process per node, so parallel ranks never download over each other.
        if self.hparams["data"] == "cifar10" and not (self.root / "cifar-10-batches-py").is_dir():
            try:
                torchvision.datasets.CIFAR10(str(self.root), train=True, download=True)
            except (OSError, RuntimeError) as err:  # offline, a proxy, a full disk, a bad checksum
                missing = f"CIFAR-10 is not in {self.root} and the download failed ({err})"
                raise ConfigError("data_dir", f"{missing}; copy cifar-10-batches-py/ there") from None

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

    def _loader(self, split: str) -> DataLoader[Any]:
        hp, dataset = self.hparams, self.datasets[split]
        options: dict[str, Any] = dict(
            num_workers=hp["num_workers"],
            pin_memory=hp["pin_memory"],
            persistent_workers=hp["num_workers"] > 0,  # no worker restart cost at every epoch and validation
            generator=torch.Generator().manual_seed(hp["seed"]),  # seeds the workers, leaving the global RNG alone
            worker_init_fn=ignore_stop_signals,  # a SIGTERM to the process group must not kill them before the save
        )
        if split != "train":
            return DataLoader(dataset, batch_size=hp["batch_size"], **options)
        # The order depends only on seed and epoch, and a checkpoint records how far into it training got.
        # drop_last keeps shapes static: no recompile, no cuDNN re-tune, no tiny last step.
        batches = SkippingBatchSampler(EpochShuffle(dataset, hp["seed"]), hp["batch_size"], drop_last=True)
        return ResumableLoader(dataset, batch_sampler=batches, **options)

    def train_dataloader(self) -> DataLoader[Any]:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader[Any]:
        return self._loader("test")

    def on_after_batch_transfer(self, batch: Batch, dataloader_idx: int) -> Batch:
        x, y = batch
        size = self.hparams["image_size"]
        x = x.float()
        if x.shape[-2:] != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        if self.trainer is not None and self.trainer.training:
            x = random_crop_flip(x, pad=max(1, size // 8))
        mean, std = _normalization(x.device)
        x = (x - mean) / std
        if self.hparams["channels_last"]:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y
