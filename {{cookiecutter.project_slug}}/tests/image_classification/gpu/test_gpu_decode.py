"""GPU JPEG decoding (nvJPEG through TorchCodec) against the CPU decoder, `--decode auto`, and loader workers that
start after CUDA is up. None of these has a CPU twin that could pass while the GPU form is broken: each asserts that
the GPU path really ran."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import torch

import train
from {{ cookiecutter.package_name }}.tasks.image_classification.data import (
    ImageDataModule,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.decoding import (
    decode_each,
    decode_rgb,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.images import (
    ImageFiles,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.sources import (
    photo,
    write_photos,
)

from .probes import GPU, NEEDS_TORCHCODEC

pytestmark = GPU


def spy_on_nvjpeg(monkeypatch: pytest.MonkeyPatch) -> list[list[torch.Tensor]]:
    """Each successful nvJPEG call's images, in call order: a silent fallback to the CPU decoder leaves none."""
    import torchcodec.decoders as decoders

    nvjpeg, calls = decoders.decode_jpeg, []

    def spy(sources: Any, **options: Any) -> Any:
        images = nvjpeg(sources, **options)
        calls.append(images if isinstance(images, list) else [images])
        return images

    monkeypatch.setattr(decoders, "decode_jpeg", spy)
    return calls


@NEEDS_TORCHCODEC
def test_gpu_decode_equals_cpu_decode_and_really_runs_on_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchvision.io import encode_jpeg, encode_png

    generator = torch.Generator().manual_seed(0)
    photos = [photo(generator, 375, 500) for _ in range(6)]
    encoded = [encode_jpeg(p, quality=90) for p in photos] + [encode_png(photos[0])]
    calls = spy_on_nvjpeg(monkeypatch)
    decoded = decode_each(encoded, "cuda")
    assert [len(images) for images in calls] == [6], "the six JPEGs in one nvJPEG call, the PNG on the CPU"
    for data, image in zip(encoded, decoded, strict=True):
        assert image is not None and image.device.type == "cuda" and image.dtype == torch.uint8
        diff = (image.cpu().float() - decode_rgb(data).float()).abs()
        report = f"mean |diff| {diff.mean():.3f}, max {diff.max():.0f}"
        assert diff.mean() < 1.0 and diff.max() <= 32, f"nvJPEG and libjpeg differ only in rounding: {report}"


@NEEDS_TORCHCODEC
def test_decode_auto_picks_the_gpu_for_jpegs_and_training_decodes_every_batch_there(
    tiny_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_photos(tmp_path / "photos", samples=32, distinct=8, size=(75, 100))
    calls = spy_on_nvjpeg(monkeypatch)  # workers only read bytes: the decoding is in this process
    args = [*tiny_args, "--accelerator=cuda", "--precision=bf16-mixed", "--num-workers=2"]
    train.main([*args, "--data=folder", f"--data-dir={tmp_path / 'photos'}", "--max-epochs=2"])
    out = capsys.readouterr().out
    assert "decode=gpu" in out and "test/acc=" in out
    decoded = [image for images in calls for image in images]
    # 2 epochs of 4 training batches of 8, and each epoch's validation: every one through nvJPEG, none on the CPU
    assert len(calls) >= 8 and len(decoded) >= 2 * 32, f"{len(decoded)} images in {len(calls)} nvJPEG calls"
    assert all(image.device.type == "cuda" for image in decoded)


def test_loader_workers_started_after_cuda_init_survive_cuda_tensors_in_the_garbage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What killed bench.py's loader benchmark (issue #14): a worker forked after CUDA init whose garbage collector
    frees an inherited CUDA tensor dies with 'CUDA error: initialization error'."""
    write_photos(tmp_path / "photos", samples=16, distinct=4, size=(30, 40))
    torch.zeros(1, device="cuda")
    getitem = ImageFiles.__getitem__

    def collecting(self: ImageFiles, index: int) -> tuple[torch.Tensor, int]:
        gc.collect()  # what any worker's allocations trigger sooner or later
        return getitem(self, index)

    monkeypatch.setattr(ImageFiles, "__getitem__", collecting)  # seen by forked workers only
    gc.disable()
    try:
        cycle: list[object] = [torch.ones(1024, device="cuda")]
        cycle.append(cycle)
        del cycle  # garbage that only the collector can free
        dm = ImageDataModule(data="folder", data_dir=str(tmp_path / "photos"), image_size=16, batch_size=4)
        dm.hparams["num_workers"] = 2
        dm.setup("fit")
        batches = list(dm.train_dataloader())
    finally:
        gc.enable()
    assert len(batches) == 4
