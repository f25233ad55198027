"""GPU JPEG decoding (nvJPEG through TorchCodec) against the CPU decoder, `--decode auto`, and loader workers that
start after CUDA is up. None of these has a CPU twin that could pass while the GPU form is broken: each asserts that
the GPU path really ran."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch
from conftest import run_train
from probes import GPU
from torchvision.io import encode_jpeg, encode_png

from {{ cookiecutter.package_name }}.data import ImageDataModule
from {{ cookiecutter.package_name }}.loader_benchmark import photo, write_photos
from {{ cookiecutter.package_name }}.transforms import ImageFiles, decode_each, decode_rgb

pytestmark = GPU
decoders = pytest.importorskip("torchcodec.decoders", reason="GPU decoding needs TorchCodec, absent on this platform")


def test_gpu_decode_equals_cpu_decode_and_really_runs_on_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = torch.Generator().manual_seed(0)
    photos = [photo(generator, 375, 500) for _ in range(6)]
    encoded = [encode_jpeg(p, quality=90) for p in photos] + [encode_png(photos[0])]
    nvjpeg = decoders.decode_jpeg
    batches: list[int] = []

    def spy(sources: object, **options: object) -> object:
        batches.append(len(sources) if isinstance(sources, list) else 1)
        return nvjpeg(sources, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(decoders, "decode_jpeg", spy)
    decoded = decode_each(encoded, "cuda")
    assert batches == [6], "the six JPEGs in one nvJPEG call, the PNG on the CPU"
    for data, image in zip(encoded, decoded, strict=True):
        assert image is not None and image.device.type == "cuda" and image.dtype == torch.uint8
        diff = (image.cpu().float() - decode_rgb(data).float()).abs()
        assert diff.mean() < 1.0 and diff.max() <= 32, "nvJPEG and libjpeg differ only in IDCT/upsampling rounding"


def test_decode_auto_picks_the_gpu_for_jpegs_and_trains(tiny_args: list[str], tmp_path: Path) -> None:
    write_photos(tmp_path / "photos", samples=32, distinct=8, size=(75, 100))
    args = [*tiny_args, "--accelerator=cuda", "--precision=bf16-mixed", "--num-workers=2"]
    result = run_train(*args, "--data=folder", f"--data-dir={tmp_path / 'photos'}", "--max-epochs=2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "decode=gpu" in result.stdout and "test/acc=" in result.stdout
    assert "exited unexpectedly" not in result.stderr


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
