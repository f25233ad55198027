"""Image files to uint8 tensors for the loaders: the dataset of files, batches of pixels (decoded in the workers) or of
encoded bytes (decoded on the device by nvJPEG), each image's shorter side limited before it is batched."""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset

from .decoding import UnreadableImageError, decode_each, decode_rgb, gpu_decodable
from .transforms import CROP_PCT


def read_bytes(path: str) -> Tensor:
    """A file's bytes as a 1-D uint8 tensor: all a GPU-decoding loader worker does per sample."""
    with open(path, "rb") as fh:
        data = fh.read()
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


class ImageFiles(Dataset[tuple[Tensor, int]]):
    """Image files by path, as (tensor, label); label -1 when there are no labels (prediction).

    mode "decoded": the tensor is the uint8 RGB image (3, H, W), decoded here, in the loader worker (CPU decoding),
    its shorter side limited to `max_side`. Mode "bytes": the file's encoded bytes, decoded later in one batch on the
    device. A file no decoder can read is skipped with a warning naming it and the next one takes its place, so
    batch shapes stay fixed: one bad file in a million should not end a run hours in. In bytes mode, files nvJPEG
    cannot take are decoded here once just to check them; the device-side fallback decodes them again."""

    def __init__(
        self, paths: Sequence[str], labels: Sequence[int] | None = None, mode: str = "decoded", max_side: int = 0
    ) -> None:
        if mode not in ("decoded", "bytes"):
            raise ValueError(f"mode is 'decoded' or 'bytes', not {mode!r}")
        self.paths, self.mode, self.max_side = list(paths), mode, max_side
        self.labels = list(labels) if labels is not None else [-1] * len(self.paths)

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(path, label) pairs, as torchvision's ImageFolder names them."""
        return list(zip(self.paths, self.labels, strict=True))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        for i in (j % len(self) for j in range(index, index + len(self))):
            try:
                return self._load(i), self.labels[i]
            except (UnreadableImageError, OSError) as err:
                warnings.warn(f"skipping unreadable image {self.paths[i]}: {err}", stacklevel=2)
        raise UnreadableImageError(f"none of the {len(self)} images can be read, e.g. {self.paths[0]}")

    def readable(self) -> bool:
        """Whether any file can be read: one read when the first can, all of them only when none can."""
        for i in range(len(self)):
            with contextlib.suppress(UnreadableImageError, OSError):
                self._load(i)
                return True
        return False

    def _load(self, i: int) -> Tensor:
        return self._decode(read_bytes(self.paths[i]))

    def _decode(self, data: Tensor) -> Tensor:  # a file's bytes, as streaming.StreamedImages reads them too
        if self.mode == "bytes":
            if not gpu_decodable(data):
                decode_rgb(data)
            return data
        image = decode_rgb(data)
        return limit_size(image, self.max_side) if self.max_side else image


def collate_images(samples: Sequence[tuple[Tensor, int]]) -> tuple[Tensor, Tensor, Tensor]:
    """Decoded images of any sizes -> (padded uint8 batch (N, 3, H, W), sizes (N, 2), labels (N,))."""
    images, sizes = pad_images([s[0] for s in samples])
    return images, sizes, torch.tensor([s[1] for s in samples])


def collate_bytes(samples: Sequence[tuple[Tensor, int]]) -> tuple[Tensor, Tensor, Tensor]:
    """Encoded files of any lengths -> (all bytes end to end, 1-D uint8; their lengths (N,); labels (N,)).

    One flat tensor pins and copies in one go, and wastes nothing on padding."""
    flat = torch.cat([s[0] for s in samples]) if samples else torch.empty(0, dtype=torch.uint8)
    lengths = torch.tensor([len(s[0]) for s in samples], dtype=torch.int64)
    return flat, lengths, torch.tensor([s[1] for s in samples])


def split_bytes(flat: Tensor, lengths: Tensor) -> list[Tensor]:
    """Undo collate_bytes: one 1-D uint8 tensor per file (views, no copy)."""
    return list(torch.split(flat, lengths.tolist()))


def is_encoded(batch: Sequence[Tensor]) -> bool:
    """A collate_bytes batch (bytes end to end, lengths, labels), not a collate_images one (images, sizes, labels)."""
    return len(batch) == 3 and batch[0].ndim == 1


def keep_bytes_on_host(batch: Sequence[Tensor], device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """`transfer_batch_to_device` for a collate_bytes batch: the bytes stay in (pinned) host memory, where nvJPEG and
    the CPU fallback read them; only the labels go to `device`, and tell `decode_encoded` where to decode to."""
    flat, lengths, labels = batch
    return flat, lengths, labels.to(device, non_blocking=True)


def decode_encoded(
    batch: Sequence[Tensor], max_side: int, fill: bool, names: Sequence[str] = ()
) -> tuple[Tensor, Tensor, Tensor]:
    """A collate_bytes batch -> (padded uint8 images, sizes, labels) on the labels' device, for training and predict.py
    alike: `decode_each` (one nvJPEG call, the CPU per sample for the rest), shorter sides limited as workers do.

    A file the worker could read but no decoder here can (rare: a corrupt JPEG body) is named in a warning (by
    `names[label]` when given: predict.py's labels are input positions), then with `fill` replaced by the batch's
    first readable image and its label (training keeps static shapes), else dropped with its label (prediction:
    a stand-in image would be a wrong row for the dropped input)."""
    flat, lengths, labels = batch
    decoded = decode_each(split_bytes(flat, lengths), labels.device)
    keep = [i for i, image in enumerate(decoded) if image is not None]
    for i in (i for i, image in enumerate(decoded) if image is None):
        named = f"unreadable image {names[int(labels[i])]}: no decoder can read it" if names else ""
        warnings.warn(f"skipping {named or 'an image no decoder can read'} (sample {i} of the batch)", stacklevel=2)
    if not keep:
        if fill:
            raise UnreadableImageError(f"none of the {len(decoded)} images of this batch can be decoded")
        empty = torch.empty((0, 3, 1, 1), dtype=torch.uint8, device=labels.device)
        return empty, torch.empty((0, 2), dtype=torch.int64, device=labels.device), labels[:0]
    rows = [i if decoded[i] is not None else keep[0] for i in range(len(decoded))] if fill else keep
    if len(keep) < len(decoded):  # only then: indexing copies the rows to the device
        labels = labels[torch.tensor(rows, device=labels.device)]
    images = [limit_size(image, max_side) for image in (decoded[i] for i in rows) if image is not None]
    padded, sizes = pad_images(images)
    return padded, sizes, labels


def pad_images(images: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Images of any sizes -> one (N, 3, Hmax, Wmax) batch and their (height, width) sizes, (N, 2).

    The padding repeats each image's last row and column, so the bilinear samples that roi_align takes half a pixel
    inside a box's far edge never blend in anything but the image."""
    height, width = max(i.shape[-2] for i in images), max(i.shape[-1] for i in images)
    batch = images[0].new_empty((len(images), 3, height, width))
    for n, image in enumerate(images):
        h, w = image.shape[-2:]
        batch[n, :, :h, :w] = image
        batch[n, :, h:, :w] = image[:, -1:, :]
        batch[n, :, :, w:] = batch[n, :, :, w - 1 : w]
    sizes = torch.tensor([list(i.shape[-2:]) for i in images], dtype=torch.int64, device=images[0].device)
    return batch, sizes


def max_side(image_size: int, crop_pct: float = CROP_PCT) -> int:
    """The shorter side decoded photos are shrunk to: twice the eval resize, enough for all but the smallest random
    crops, and a batch of mixed sizes pads to a bounded size (ImageNet has 4000 px photos). Prediction must use the
    same, to see what validation saw."""
    return math.ceil(2 * image_size / crop_pct)


def limit_size(image: Tensor, max_side: int) -> Tensor:
    """Shrink an image whose shorter side exceeds `max_side` (antialiased), so that a batch of mixed photos pads to
    a bounded size; the crops never need more resolution than that."""
    h, w = image.shape[-2:]
    if min(h, w) <= max_side:
        return image
    scale = max_side / min(h, w)
    size = [max(1, round(h * scale)), max(1, round(w * scale))]
    resized = torch.nn.functional.interpolate(
        image[None].float(), size=size, mode="bilinear", antialias=True, align_corners=False
    )
    return resized[0].round().clamp(0, 255).to(torch.uint8)
