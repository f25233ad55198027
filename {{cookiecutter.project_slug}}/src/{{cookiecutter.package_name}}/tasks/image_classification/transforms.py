"""The ImageNet-style crops, on the device, shared by training (data.py) and inference (predict.py).

The crops are one `roi_align` call over the whole batch, on whichever device the batch is on: one kernel instead of
a Python loop of small resizes, and the same code on CPU and GPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.ops import roi_align

CROP_PCT = 0.875  # eval: the centre crop covers 87.5% of the shorter side, the ImageNet convention (256 -> 224)
SCALE = (0.08, 1.0)  # train: the crop's share of the image area
RATIO = (3 / 4, 4 / 3)  # train: the crop's width / height


def eval_boxes(sizes: Tensor, crop_pct: float = CROP_PCT) -> Tensor:
    """(x1, y1, x2, y2) of the centre square covering `crop_pct` of each image's shorter side: resizing the shorter
    side to image_size / crop_pct and centre-cropping image_size is the same region."""
    h, w = sizes[:, 0].float(), sizes[:, 1].float()
    side = crop_pct * torch.minimum(h, w)
    x1, y1 = (w - side) / 2, (h - side) / 2
    return torch.stack([x1, y1, x1 + side, y1 + side], dim=1)


def random_resized_boxes(
    sizes: Tensor, scale: tuple[float, float] = SCALE, ratio: tuple[float, float] = RATIO, tries: int = 10
) -> Tensor:
    """Random-resized-crop boxes, drawn on sizes' device from torch's global generator (which resume.py saves).

    Like torchvision's RandomResizedCrop: up to `tries` (area, ratio) draws per image, the first that fits wins;
    if none fits, the largest centre crop with the ratio clamped into range. All images in one go."""
    n, device = len(sizes), sizes.device
    h, w = sizes[:, 0].float()[:, None], sizes[:, 1].float()[:, None]
    area = h * w * torch.empty(n, tries, device=device).uniform_(*scale)
    log_ratio = torch.empty(n, tries, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1]))
    aspect = log_ratio.exp()
    cw, ch = (area * aspect).sqrt(), (area / aspect).sqrt()
    fits = (cw <= w) & (ch <= h)
    first = fits.float().argmax(dim=1, keepdim=True)  # index of the first try that fits (0 if none does)
    cw, ch, any_fit = cw.gather(1, first)[:, 0], ch.gather(1, first)[:, 0], fits.any(dim=1)
    h, w = h[:, 0], w[:, 0]
    image_ratio = w / h
    fallback_w = torch.where(image_ratio < ratio[0], w, torch.where(image_ratio > ratio[1], h * ratio[1], w))
    fallback_h = torch.where(image_ratio < ratio[0], w / ratio[0], torch.where(image_ratio > ratio[1], h, h))
    cw, ch = torch.where(any_fit, cw, fallback_w), torch.where(any_fit, ch, fallback_h)
    offset = torch.rand(n, 2, device=device, dtype=torch.float32)
    x1 = torch.where(any_fit, offset[:, 0] * (w - cw), (w - cw) / 2)
    y1 = torch.where(any_fit, offset[:, 1] * (h - ch), (h - ch) / 2)
    return torch.stack([x1, y1, x1 + cw, y1 + ch], dim=1)


def crop_resize(images: Tensor, boxes: Tensor, size: int) -> Tensor:
    """One `roi_align` call: box n of image n, resized to size x size, float in [0, 255].

    Each output pixel averages ceil(box side / size)^2 samples, so shrinking is antialiased as a resize would be."""
    # shape[0], not len(): len() fixes the batch size in an exported graph (export.py), shape[0] keeps it symbolic.
    rois = torch.cat([torch.arange(boxes.shape[0], device=images.device, dtype=torch.float32)[:, None], boxes], dim=1)
    x = images.float()
    return roi_align(x, rois.to(x.dtype), output_size=(size, size), spatial_scale=1.0, sampling_ratio=-1, aligned=True)


def eval_transform(images: Tensor, sizes: Tensor, image_size: int, crop_pct: float = CROP_PCT) -> Tensor:
    """Evaluation and prediction: resize the shorter side to image_size / crop_pct, centre-crop image_size.

    `images` is a padded batch (N, 3, H, W) of any dtype, `sizes` the real (height, width) of each; float [0, 255]
    (N, 3, image_size, image_size) out, deterministic."""
    return crop_resize(images, eval_boxes(sizes.to(images.device), crop_pct), image_size)


def train_transform(images: Tensor, sizes: Tensor, image_size: int) -> Tensor:
    """Training: a random-resized crop (scale 0.08-1, ratio 3/4-4/3), then a random horizontal flip, on the batch's
    device and from torch's global generators; float [0, 255] (N, 3, image_size, image_size) out."""
    boxes = random_resized_boxes(sizes.to(images.device))
    x = crop_resize(images, boxes, image_size)
    return random_flip(x)


def random_flip(x: Tensor) -> Tensor:
    """Each image of the batch mirrored left-right with probability 1/2."""
    flip = torch.rand(len(x), 1, 1, 1, device=x.device) < 0.5
    return torch.where(flip, x.flip(-1), x)


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
    return random_flip(x)
