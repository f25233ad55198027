"""Image bytes to uint8 RGB tensors: TorchCodec first (nvJPEG in batches on a GPU), CPU per sample for the rest.

torchvision deprecated its decoders in favour of TorchCodec; torchvision's decoder is used only where TorchCodec has no
wheel for the platform, so the project still installs and runs there. `decode_choice` decides where --decode auto
decodes: on the GPU when it can and the files are mostly JPEGs.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from lightning_gpu_engine import ConfigError
from torch import Tensor

NVJPEG_DEVICES = ("cuda",)  # device types whose batches go to TorchCodec's nvJPEG decoder


class UnreadableImageError(RuntimeError):
    """No decoder can read these bytes: empty, truncated, not an image."""


def torchcodec_available() -> bool:
    try:
        # Image decoding came in TorchCodec 0.16; an older one (0.11 is torch 2.11's match) imports but cannot decode.
        from torchcodec.decoders import decode_image, decode_jpeg  # noqa: F401
    except (ImportError, OSError, RuntimeError):  # no wheel for this platform, or its native library fails to load
        return False
    return True


def _reason(err: Exception) -> str:
    return re.sub(r"^\w+, \S+:\d+, ", "", str(err).strip().splitlines()[0] if str(err).strip() else repr(err))


def decode_rgb(encoded: Tensor) -> Tensor:
    """Encoded image bytes (1-D uint8, CPU) -> uint8 RGB (3, H, W) on the CPU, whatever the format or bit depth.

    Greyscale, CMYK, palette, alpha, 16-bit PNG, WebP and GIF all become 8-bit RGB, and an animated GIF or WebP its
    first frame; unreadable bytes raise UnreadableImageError with the decoder's reason."""
    if encoded.numel() == 0:
        raise UnreadableImageError("empty file")
    try:
        if torchcodec_available():
            from torchcodec.decoders import decode_image

            image = decode_image(encoded, mode="RGB", output_dtype=torch.uint8)
        else:
            from torchvision.io import ImageReadMode
            from torchvision.io import decode_image as tv_decode_image

            image = tv_decode_image(encoded, mode=ImageReadMode.RGB)
    except (RuntimeError, ValueError) as err:
        if "Animated webp" not in str(err):
            raise UnreadableImageError(_reason(err)) from None
        image = _first_frame(encoded)  # torchvision's WebP decoder reads still images only
    if image.ndim == 4:  # an animation's frames (N, 3, H, W)
        image = image[0]
    if image.dtype == torch.uint16:  # torchvision keeps 16-bit PNGs 16-bit: scale 0..65535 to 0..255
        image = ((image.to(torch.int32) * 255 + 32767) // 65535).to(torch.uint8)
    return image


def _first_frame(encoded: Tensor) -> Tensor:
    """The first frame of an animation, by Pillow (which torchvision depends on), as uint8 RGB (3, H, W)."""
    import io

    import numpy as np
    from PIL import Image

    try:
        with Image.open(io.BytesIO(encoded.numpy().tobytes())) as animation:
            pixels = np.asarray(animation.convert("RGB"))
    except (OSError, ValueError) as err:
        raise UnreadableImageError(_reason(err)) from None
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()


def gpu_decodable(encoded: Tensor) -> bool:
    """True for what nvJPEG decodes right: a complete 8-bit, 3-component (YCbCr) JPEG of at least 2 x 2 pixels.

    Greyscale and CMYK JPEGs, 12-bit JPEGs, other formats and truncated files go to the CPU decoder instead. Reading
    the frame header costs microseconds; a failed GPU batch would cost the whole batch."""
    data = encoded.cpu().numpy().data  # no copy: a batch of photos is checked in the training process
    if len(data) < 4 or bytes(data[:2]) != b"\xff\xd8" or bytes(data[-64:]).rstrip(b"\x00")[-2:] != b"\xff\xd9":
        return False
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return False
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        length = (data[i + 2] << 8) | data[i + 3]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start-of-frame segment
            precision, height = data[i + 4], (data[i + 5] << 8) | data[i + 6]
            width, components = (data[i + 7] << 8) | data[i + 8], data[i + 9]
            return marker in (0xC0, 0xC1, 0xC2) and precision == 8 and components == 3 and min(height, width) >= 2
        i += 2 + length
    return False


def decode_each(encoded: Sequence[Tensor], device: torch.device | str) -> list[Tensor | None]:
    """Decode a batch onto `device`; None where no decoder can read the bytes.

    On CUDA with TorchCodec the plain JPEGs go to nvJPEG in one batched call; every other sample, and every sample
    of a batch nvJPEG rejects, is decoded on the CPU, per sample, and copied over."""
    device = torch.device(device)
    out: list[Tensor | None] = [None] * len(encoded)
    on_gpu = [i for i, e in enumerate(encoded) if device.type in NVJPEG_DEVICES and gpu_decodable(e)]
    if on_gpu and torchcodec_available():
        from torchcodec.decoders import decode_jpeg

        try:
            batch = decode_jpeg([encoded[i] for i in on_gpu], mode="RGB", device=device)
            assert isinstance(batch, list)
            for i, image in zip(on_gpu, batch, strict=True):
                out[i] = image
        except RuntimeError:  # one bad sample fails the batched call: retry one by one, the rest go to the CPU
            for i in on_gpu:
                with contextlib.suppress(RuntimeError):
                    single = decode_jpeg(encoded[i], mode="RGB", device=device)
                    assert isinstance(single, Tensor)
                    out[i] = single
    for i, data in enumerate(encoded):
        if out[i] is None:
            with contextlib.suppress(UnreadableImageError):
                out[i] = decode_rgb(data.cpu()).to(device, non_blocking=True)
    return out


def decode_batch(encoded: Sequence[Tensor], device: torch.device | str) -> list[Tensor]:
    """`decode_each`, raising UnreadableImageError naming the first sample that no decoder can read."""
    images = decode_each(encoded, device)
    for i, image in enumerate(images):
        if image is None:
            raise UnreadableImageError(f"sample {i} of the batch cannot be decoded")
    return [image for image in images if image is not None]


def mostly_jpegs(names: Iterable[str], sample: int = 256) -> bool:
    """Most of the first `sample` file names are JPEGs: what GPU decoding is for."""
    seen = jpegs = 0
    for name in names:
        seen, jpegs = seen + 1, jpegs + name.lower().endswith((".jpg", ".jpeg"))
        if seen >= sample:
            break
    return seen > 0 and 2 * jpegs > seen


def holds_jpegs(train_dir: Path, sample: int = 256) -> bool:
    """Most of the first `sample` files of the class folders are JPEGs."""
    return mostly_jpegs((p.name for f in sorted(train_dir.iterdir()) if f.is_dir() for p in f.iterdir()), sample)


def decode_choice(
    decode: str, accelerator: str, data: str = "folder", data_dir: str = "", images: Sequence[str | Path] | None = None
) -> str:
    """Where images are decoded, "cpu" (loader workers) or "gpu" (nvJPEG), for --decode `decode`.
    `images`: predict.py's inputs, which take the place of the training folder."""
    if decode == "cpu":
        return "cpu"
    if images is None and data not in ("folder", "streaming"):
        if decode == "gpu":
            files = "gpu decodes image files, which only --data folder and streaming read"
            raise ConfigError("decode", f"{files}, not {data}")
        return "cpu"
    if decode == "gpu" and accelerator != "cuda":
        raise ConfigError("decode", f"gpu needs a CUDA GPU, not {accelerator}; use cpu or auto")
    if decode == "gpu" and not torchcodec_available():
        raise ConfigError("decode", "gpu needs TorchCodec, which is not installed here; pip install torchcodec, or cpu")
    if decode == "gpu":
        return "gpu"
    if accelerator != "cuda" or not torchcodec_available():
        return "cpu"
    if data == "streaming":  # chunks hold the files' bytes: what nvJPEG cannot take falls back to the CPU per image
        return "gpu"
    train = Path(data_dir) / "train"
    jpegs = mostly_jpegs(str(p) for p in images) if images is not None else train.is_dir() and holds_jpegs(train)
    return "gpu" if jpegs else "cpu"
