"""Decoding every kind of file, and the geometry of the on-device crops, on any device."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from {{ cookiecutter.package_name }}.tasks.image_classification import decoding
from {{ cookiecutter.package_name }}.tasks.image_classification.decoding import (
    UnreadableImageError,
    decode_each,
    decode_rgb,
    gpu_decodable,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.images import (
    collate_bytes,
    decode_encoded,
    limit_size,
    pad_images,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.transforms import (
    crop_resize,
    eval_transform,
    random_resized_boxes,
    train_transform,
)

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")]),
]


def encode(image: Image.Image, fmt: str, **options: object) -> torch.Tensor:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def photo(height: int = 30, width: int = 40, seed: int = 0) -> Image.Image:
    """Smooth colour gradients plus mild noise: what JPEG is made for, so decoders agree closely."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([255 * x / width, 255 * y / height, 128 + 60 * np.sin(x / 5)], axis=-1)
    return Image.fromarray(np.clip(pixels + rng.normal(0, 4, pixels.shape), 0, 255).astype(np.uint8))


def samples() -> dict[str, torch.Tensor]:
    rgb = photo()
    jpeg = encode(rgb, "JPEG", quality=95)
    return {
        "jpeg": jpeg,
        "png": encode(rgb, "PNG"),
        "png16": encode(Image.fromarray((np.arange(1200).reshape(30, 40) * 54).astype(np.uint16)), "PNG"),
        "webp": encode(rgb, "WEBP"),
        "gif": encode(rgb, "GIF"),
        "cmyk": encode(rgb.convert("CMYK"), "JPEG"),
        "grey": encode(rgb.convert("L"), "JPEG"),
        "1x1": encode(Image.new("RGB", (1, 1), (200, 10, 10)), "JPEG"),
        "truncated": jpeg[: len(jpeg) // 2].clone(),
        "zero-byte": torch.empty(0, dtype=torch.uint8),
    }


UNREADABLE = ("truncated", "zero-byte")


def test_every_readable_format_becomes_8bit_rgb_and_the_rest_raise() -> None:
    for name, data in samples().items():
        if name in UNREADABLE:
            with pytest.raises(UnreadableImageError):
                decode_rgb(data)
            continue
        image = decode_rgb(data)
        assert image.dtype == torch.uint8 and image.shape[0] == 3, name
    assert decode_rgb(samples()["1x1"])[:, 0, 0].tolist() == pytest.approx([200, 10, 10], abs=3)
    png16 = decode_rgb(samples()["png16"])
    assert png16.shape == (3, 30, 40) and 200 < int(png16.max()) <= 255, "16-bit scaled to 8 bits, not truncated"


@pytest.mark.parametrize("torchcodec", [True, False], ids=["torchcodec", "torchvision"])
@pytest.mark.parametrize("fmt", ["GIF", "WEBP"])
def test_an_animation_decodes_to_its_first_frame_with_either_decoder(
    monkeypatch: pytest.MonkeyPatch, fmt: str, torchcodec: bool
) -> None:
    """train.py and predict.py on animations are in test_inputs.py; here both decoders, torchvision's included."""
    monkeypatch.setattr(decoding, "torchcodec_available", lambda: torchcodec)
    frames = [Image.new("RGB", (10, 12), (v, 255 - v, 90)) for v in (30, 220, 120)]
    image = decode_rgb(encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=100, loop=0))
    assert image.shape == (3, 12, 10) and image[:, 6, 5].tolist() == pytest.approx([30, 225, 90], abs=8)


def test_only_complete_three_channel_jpegs_go_to_the_gpu_decoder() -> None:
    chosen = {name for name, data in samples().items() if gpu_decodable(data)}
    assert chosen == {"jpeg"}


def test_per_sample_fallback_sends_plain_jpegs_to_nvjpeg_in_one_call_and_the_rest_to_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The routing of a GPU batch, run on the meta device standing in for CUDA: which files go to the batched
    nvJPEG call, and that everything else, or a batch nvJPEG rejects, is decoded per sample on the CPU."""
    import torchcodec.decoders

    calls: list[int] = []

    def fake_nvjpeg(sources: object, mode: str, device: torch.device) -> object:
        batch = sources if isinstance(sources, list) else [sources]
        calls.append(len(batch))
        if fail_batches and len(batch) > 1:
            raise RuntimeError("nvJPEG rejected the batch")
        images = [torch.zeros(3, 30, 40, dtype=torch.uint8, device=device) for _ in batch]
        return images if isinstance(sources, list) else images[0]

    monkeypatch.setattr(decoding, "NVJPEG_DEVICES", ("meta",))
    monkeypatch.setattr(torchcodec.decoders, "decode_jpeg", fake_nvjpeg)
    files = samples()
    encoded = [files["jpeg"], *files.values(), files["jpeg"]]
    for fail_batches in (False, True):
        calls.clear()
        out = decode_each(encoded, "meta")
        assert calls == ([3] if not fail_batches else [3, 1, 1, 1]), "one batched call; one by one after a failure"
        names = ["jpeg", *files, "jpeg"]
        for name, image in zip(names, out, strict=True):
            if name in UNREADABLE:
                assert image is None, name
            else:
                assert image is not None and image.device.type == "meta" and image.shape[0] == 3, name


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_decoding_of_a_batch_matches_one_by_one_and_marks_the_unreadable(device: str) -> None:
    files = samples()
    out = decode_each(list(files.values()), device)
    for (name, data), image in zip(files.items(), out, strict=True):
        if name in UNREADABLE:
            assert image is None
        else:
            assert image is not None and image.device.type == device
            diff = (image.cpu().float() - decode_rgb(data).float()).abs()
            assert diff.mean() < 1.5 and diff.max() <= 40, f"{name}: decoders on {device} and CPU disagree"


def test_a_bytes_batch_decodes_to_what_the_workers_give_filling_or_dropping_what_no_decoder_reads() -> None:
    """The one decoding of encoded batches that training (fill: static shapes) and predict.py (drop: every label is
    an input's position) share."""
    files = samples()
    names = ["jpeg", "truncated", "png", "grey", "zero-byte"]
    batch = collate_bytes([(files[name], 10 + i) for i, name in enumerate(names)])
    decoded = [limit_size(decode_rgb(files[name]), 20) for name in ("jpeg", "png", "grey")]
    expected, expected_sizes = pad_images(decoded)

    with pytest.warns(UserWarning) as warned:
        images, sizes, labels = decode_encoded(batch, 20, fill=False, names=[f"{c}.jpg" for c in "_" * 10 + "abcde"])
    assert [str(w.message) for w in warned] == [
        f"skipping unreadable image {name}: no decoder can read it (sample {i} of the batch)"
        for i, name in ((1, "b.jpg"), (4, "e.jpg"))
    ], "each named by its path, found from its label"
    assert labels.tolist() == [10, 12, 13], "dropped with their labels: no other file's row stands in"
    assert torch.equal(images, expected) and torch.equal(sizes, expected_sizes), "decoded as the workers decode"

    with pytest.warns(UserWarning) as warned:
        images, sizes, labels = decode_encoded(batch, 20, fill=True)
    unnamed = [f"skipping an image no decoder can read (sample {i} of the batch)" for i in (1, 4)]
    assert [str(w.message) for w in warned] == unnamed
    assert labels.tolist() == [10, 10, 12, 13, 10], "the first readable image and its label take their place"
    assert torch.equal(images[[0, 2, 3]], expected) and torch.equal(images[1], images[0]) and len(images) == 5

    unreadable = collate_bytes([(files["truncated"], 0), (files["zero-byte"], 1)])
    with pytest.warns(UserWarning):
        images, sizes, labels = decode_encoded(unreadable, 20, fill=False)
    assert len(images) == len(sizes) == len(labels) == 0
    with pytest.warns(UserWarning), pytest.raises(UnreadableImageError, match="none of the 2 images"):
        decode_encoded(unreadable, 20, fill=True)


def test_the_bytes_of_a_file_read_as_a_tensor(tmp_path: Path) -> None:
    from {{ cookiecutter.package_name }}.tasks.image_classification.images import (
        read_bytes,
    )

    (tmp_path / "x.bin").write_bytes(b"\x01\x02\xff")
    (tmp_path / "empty.jpg").write_bytes(b"")
    assert read_bytes(str(tmp_path / "x.bin")).tolist() == [1, 2, 255]
    assert read_bytes(str(tmp_path / "empty.jpg")).numel() == 0


def test_padding_repeats_the_edge_and_records_sizes() -> None:
    images = [torch.full((3, 2, 3), 7, dtype=torch.uint8), torch.full((3, 4, 1), 9, dtype=torch.uint8)]
    batch, sizes = pad_images(images)
    assert batch.shape == (2, 3, 4, 3) and sizes.tolist() == [[2, 3], [4, 1]]
    assert (batch[0] == 7).all() and (batch[1] == 9).all()


def test_random_resized_crops_stay_inside_and_follow_the_scale_and_ratio_ranges() -> None:
    torch.manual_seed(0)
    sizes = torch.tensor([[375, 500], [500, 375], [224, 224]]).repeat(2000, 1)
    boxes = random_resized_boxes(sizes)
    x1, y1, x2, y2 = boxes.unbind(1)
    h, w = sizes[:, 0].float(), sizes[:, 1].float()
    assert (x1 >= 0).all() and (y1 >= 0).all() and (x2 <= w + 1e-3).all() and (y2 <= h + 1e-3).all()
    scale, ratio = (x2 - x1) * (y2 - y1) / (h * w), (x2 - x1) / (y2 - y1)
    assert scale.min() >= 0.08 - 1e-4 and scale.max() <= 1 + 1e-4
    assert ratio.min() >= 0.75 - 1e-4 and ratio.max() <= 4 / 3 + 1e-4
    # The accepted draws: uniform in scale up to where large crops stop fitting, symmetric in log-ratio.
    assert 0.2 < scale.quantile(0.25) < 0.35 and 0.4 < scale.median() < 0.6
    assert abs(ratio.log().mean()) < 0.02 and ratio.log().std() > 0.12
    assert (x1 / (w - (x2 - x1)).clamp(min=1e-6)).std() > 0.25, "the position is random too"


def test_a_crop_that_never_fits_falls_back_to_the_central_crop_with_clamped_ratio() -> None:
    boxes = random_resized_boxes(torch.tensor([[10, 1000], [1000, 10]]))
    width, height = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    assert torch.allclose(width / height, torch.tensor([4 / 3, 3 / 4]))
    assert torch.allclose(boxes[0], torch.tensor([500 - 20 / 3, 0, 500 + 20 / 3, 10]), atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_eval_is_deterministic_and_matches_resize_then_centre_crop(device: str) -> None:
    images = [TF.pil_to_tensor(photo(60, 80, seed=1)), TF.pil_to_tensor(photo(90, 50, seed=2))]
    batch, sizes = pad_images([i.to(device) for i in images])
    out = eval_transform(batch, sizes, image_size=28, crop_pct=0.875)
    assert out.shape == (2, 3, 28, 28) and out.dtype == torch.float32 and out.device.type == device
    assert torch.equal(out, eval_transform(batch, sizes, image_size=28, crop_pct=0.875))
    for image, got in zip(images, out.cpu(), strict=True):
        resized = TF.resize(image.float(), [32], antialias=True)  # shorter side to 28 / 0.875
        expected = TF.center_crop(resized, [28, 28])
        assert (got - expected).abs().mean() < 3, "same region at the same scale as torchvision's recipe"


@pytest.mark.parametrize("device", DEVICES)
def test_train_transform_on_any_device_is_the_cpu_crop_of_its_boxes_maybe_flipped(device: str) -> None:
    images = [TF.pil_to_tensor(photo(60, 80, seed=1)), TF.pil_to_tensor(photo(40, 70, seed=2))]
    batch, sizes = pad_images(images)
    torch.manual_seed(3)
    boxes = random_resized_boxes(sizes.to(device))  # what train_transform draws first from the same generator
    torch.manual_seed(3)
    out = train_transform(batch.to(device), sizes.to(device), image_size=24)
    assert out.shape == (2, 3, 24, 24) and out.device.type == device and out.min() >= 0 and out.max() <= 255
    reference = crop_resize(batch, boxes.cpu(), 24)  # roi_align on the CPU
    for got, crop in zip(out.cpu(), reference, strict=True):
        assert torch.allclose(got, crop, atol=1e-2) or torch.allclose(got, crop.flip(-1), atol=1e-2)
    torch.manual_seed(3)
    assert torch.equal(out, train_transform(batch.to(device), sizes.to(device), image_size=24)), "seeded = repeatable"


BLOCK_TORCHCODEC = """
import runpy, sys
sys.modules["torchcodec"] = None  # as on a platform TorchCodec has no wheel for: importing it fails
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_without_torchcodec_folder_data_trains_with_torchvisions_decoder(tiny_args: list[str], tmp_path: Path) -> None:
    data = tmp_path / "data"
    for split, name in [(s, n) for s in ("train", "val") for n in ("a", "b")]:
        (data / split / name).mkdir(parents=True)
        for i in range(4):
            photo(20 + i, 24, seed=i).save(data / split / name / f"{i}.jpg")
    Image.fromarray((np.arange(400).reshape(20, 20) * 150).astype(np.uint16)).save(data / "train" / "b" / "16.png")
    args = [*tiny_args, "--data=folder", f"--data-dir={data}", "--batch-size=4", "--num-workers=1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCHCODEC, str(ROOT / "train.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "decode=cpu" in done.stdout and "test/acc=" in done.stdout
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
