"""Images in, uint8 batches out; float conversion, augmentation and layout happen on the device.

Sending uint8 moves four times fewer bytes to the GPU than float32, and doing the per-pixel work there keeps the CPU
loader from being the bottleneck.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
import torchvision
from lightning.pytorch.utilities import rank_zero_warn
from lightning_gpu_engine import ConfigError, StreamedItems, eval_loader, read_made_by, train_loader
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from .images import ImageFiles, collate_bytes, collate_images, decode_encoded, is_encoded, keep_bytes_on_host, max_side
from .inputs import class_folders
from .sources import CIFAR10_CLASSES, IMAGE_SUFFIXES, SHAPES, list_images, make_shapes, read_cifar10
from .streaming import TASK_NAME, StreamedImages
from .transforms import CROP_PCT, eval_transform, random_crop_flip, train_transform

Batch = tuple[Tensor, Tensor]


def image_folders(root: Path, classes: list[str], mode: str) -> dict[str, tuple[list[str], list[int]]]:
    """Each split's (paths, labels): a class's images are those in its folder at any depth.

    Refuses at start what would fail mid-run or silently mislabel: class folders unlike train/'s, a class without
    images, a split of which no image can be read."""
    splits = [split for split in ("train", "val", "test") if (root / split).is_dir()]
    for split in splits[1:]:
        found = sorted(p.name for p in (root / split).iterdir() if p.is_dir())
        if found != classes:
            raise ConfigError("data_dir", f"{root}/{split}/ has class folders {found}, but train/ has {classes}")
    samples, loops = {}, []
    for split in splits:
        paths, labels = [], []
        for label, name in enumerate(classes):
            images, skipped = list_images(root / split / name)
            if not images:
                kinds = "/".join(IMAGE_SUFFIXES)
                raise ConfigError("data_dir", f"no images in {root / split / name}/ or its subfolders; add {kinds}")
            paths += images
            labels += [label] * len(images)
            loops += skipped
        if not ImageFiles(paths, labels, mode=mode).readable():
            raise ConfigError(
                "data_dir",
                f"none of the {len(paths)} images in {root / split}/ can be read (e.g. {paths[0]}); "
                "each split needs readable JPEG, PNG, WebP or GIF files",
            )
        samples[split] = (paths, labels)
    if loops:
        rank_zero_warn(
            f"{len(loops)} folders under {root} are symlinks back into folders already listed or above them (e.g. "
            f"{loops[0]} -> {os.path.realpath(loops[0])}); each image is used once"
        )
    return samples


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
        decode: str = "cpu",
        crop_pct: float = CROP_PCT,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        # crop_pct is the model's (its hparams record it, from timm's pretrained cfg when pretrained), not the data's:
        # train.py sets it from the model before fit, and Lightning refuses the same hparam with two values.
        self.save_hyperparameters(ignore=["crop_pct"])
        self.root = Path(data_dir)
        self.crop_pct = crop_pct
        self.datasets: dict[str, TensorDataset | ImageFiles] = {}  # StreamedImages is an ImageFiles
        self.samples: dict[str, tuple[list[str], list[int]]] = {}
        self.cifar10: dict[str, tuple[Tensor, Tensor]] = {}
        self.made_by: dict[str, Any] = {}
        if data == "streaming":  # the chunks' classes, from what prepare_data.py wrote beside them
            self.made_by = read_made_by(data_dir, TASK_NAME, cache_dir)
            self.classes = list(self.made_by["classes"])
        elif data == "folder":
            self.classes = class_folders(self.root)
        else:
            self.classes = list(SHAPES) if data == "synthetic" else list(CIFAR10_CLASSES)
        if len(self.classes) < 2:
            raise ConfigError("data_dir", f"{self.root}/train/ needs at least 2 class folders, found {self.classes}")
        if data == "folder":
            self.samples = image_folders(self.root, self.classes, "bytes" if decode == "gpu" else "decoded")
        if data == "cifar10" and (self.root / "cifar-10-batches-py").is_dir():
            self._read_cifar10()  # now, so that a damaged copy is told before the run starts

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def max_side(self) -> int:
        return max_side(self.hparams["image_size"], self.crop_pct)

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
            images, labels = (self.cifar10 or self._read_cifar10())["train"]
            order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(hp["seed"]))
            n_val = len(labels) // 10
            self.datasets["val"] = TensorDataset(images[order[:n_val]], labels[order[:n_val]])
            self.datasets["train"] = TensorDataset(images[order[n_val:]], labels[order[n_val:]])
            self.datasets["test"] = TensorDataset(*self.cifar10["test"])
        elif hp["data"] == "streaming":
            mode = "bytes" if hp["decode"] == "gpu" else "decoded"
            for split in ("train", "val", "test"):
                chunks = split if split in self.made_by["items"] else "val"
                items = StreamedItems(hp["data_dir"], chunks, hp["cache_dir"])
                self.datasets[split] = StreamedImages(items, mode, max_side=self.max_side)
        else:
            mode = "bytes" if hp["decode"] == "gpu" else "decoded"
            for split in ("train", "val", "test"):
                paths, targets = self.samples[split if split in self.samples else "val"]
                self.datasets[split] = ImageFiles(paths, targets, mode=mode, max_side=self.max_side)

    def _read_cifar10(self) -> dict[str, tuple[Tensor, Tensor]]:
        self.cifar10 = {split: read_cifar10(self.root, train=split == "train") for split in ("train", "test")}
        return self.cifar10

    def _loader(self, split: str) -> DataLoader[Any]:
        hp, dataset = self.hparams, self.datasets[split]
        collate = None
        if isinstance(dataset, ImageFiles):
            collate = collate_bytes if dataset.mode == "bytes" else collate_images
        common = dict(num_workers=hp["num_workers"], pin_memory=hp["pin_memory"], collate_fn=collate)
        if split == "train":
            return train_loader(dataset, hp["batch_size"], hp["seed"], **common)  # type: ignore[arg-type]
        return eval_loader(dataset, hp["batch_size"], seed=hp["seed"], **common)  # type: ignore[arg-type]

    def train_dataloader(self) -> DataLoader[Any]:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader[Any]:
        return self._loader("test")

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if is_encoded(batch):  # encoded bytes stay in pinned host memory: nvJPEG reads them there
            return keep_bytes_on_host(batch, device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Batch:
        """uint8 in, float [0, 255] out at model resolution; the model normalises (so exports need no data code)."""
        training = self.trainer is not None and self.trainer.training
        size = self.hparams["image_size"]
        if len(batch) == 2:  # synthetic and cifar10: square images, today's pad-crop-flip
            x, y = batch
            x = x.float()
            if x.shape[-2:] != (size, size):
                x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
            if training:
                x = random_crop_flip(x, pad=max(1, size // 8))
        else:
            # fill: a file no decoder can read gives way to another of the batch, keeping the batch shape static
            images, sizes, y = decode_encoded(batch, self.max_side, fill=True) if is_encoded(batch) else batch
            x = train_transform(images, sizes, size) if training else eval_transform(images, sizes, size, self.crop_pct)
        if self.hparams["channels_last"]:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y
