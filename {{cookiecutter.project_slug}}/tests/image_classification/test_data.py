from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning_gpu_engine import ConfigError
from PIL import Image

from {{ cookiecutter.package_name }}.tasks.image_classification.data import (
    SHAPES,
    ImageDataModule,
    make_shapes,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.transforms import (
    random_crop_flip,
)


def test_synthetic_images_are_uint8_deterministic_and_cover_every_class() -> None:
    images, labels = make_shapes(300, 24, seed=7)
    assert images.shape == (300, 3, 24, 24) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64 and set(labels.tolist()) == set(range(len(SHAPES)))
    again, _ = make_shapes(300, 24, seed=7)
    other, _ = make_shapes(300, 24, seed=8)
    assert torch.equal(images, again) and not torch.equal(images, other)


def test_synthetic_splits_differ_and_batches_are_uint8() -> None:
    dm = ImageDataModule(image_size=20, batch_size=4, train_samples=20)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 3, 20, 20) and x.dtype == torch.uint8 and y.shape == (4,)
    train, val = dm.datasets["train"].tensors[0], dm.datasets["val"].tensors[0]  # type: ignore[union-attr]
    assert len(val) == 4 and not torch.equal(train[:4], val)


def test_device_side_transform_gives_unnormalised_floats_augments_only_in_training_and_keeps_channels_last() -> None:
    dm = ImageDataModule(image_size=16, channels_last=True)
    x = torch.randint(0, 256, (5, 3, 16, 16), dtype=torch.uint8)
    out, y = dm.on_after_batch_transfer((x, torch.zeros(5, dtype=torch.long)), 0)
    assert out.dtype == torch.float32 and out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, x.float()), "[0, 255] floats: the model normalises, so exports need no data code"
    again, _ = dm.on_after_batch_transfer((x, y), 0)
    assert torch.equal(out, again), "no trainer attached = evaluation: no random augmentation"


def test_random_crop_flip_moves_content_but_keeps_shape() -> None:
    torch.manual_seed(0)
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    out = random_crop_flip(x, pad=2)
    assert out.shape == x.shape and not torch.equal(out, x)


def test_small_cifar_sized_batches_are_resized_on_the_device() -> None:
    dm = ImageDataModule(image_size=24, channels_last=False)
    out, _ = dm.on_after_batch_transfer((torch.zeros(2, 3, 32, 32, dtype=torch.uint8), torch.zeros(2)), 0)
    assert out.shape == (2, 3, 24, 24)


def _write_folder(root: Path, classes: tuple[str, ...], per_class: int, splits: tuple[str, ...]) -> None:
    rng = np.random.default_rng(0)
    for split in splits:
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (10 + i, 12, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")


def test_folder_source_reads_pngs_of_any_size_crops_on_the_device_and_falls_back_to_val_for_test(
    tmp_path: Path,
) -> None:
    _write_folder(tmp_path, ("cat", "dog", "emu"), per_class=2, splits=("train", "val"))
    dm = ImageDataModule(data="folder", data_dir=str(tmp_path), image_size=8, batch_size=3, decode="cpu")
    assert dm.classes == ["cat", "dog", "emu"] and dm.num_classes == 3
    dm.setup("fit")
    images, sizes, labels = next(iter(dm.val_dataloader()))
    assert images.dtype == torch.uint8 and images.shape == (3, 3, 11, 12), "padded to the batch's largest image"
    assert sizes.tolist() == [[10, 12], [11, 12], [10, 12]] and labels.tolist() == [0, 0, 1]
    x, _ = dm.on_after_batch_transfer((images, sizes, labels), 0)
    assert x.shape == (3, 3, 8, 8) and x.dtype == torch.float32 and x.min() >= 0 and x.max() <= 255
    assert len(dm.datasets["test"]) == len(dm.datasets["val"]) == 6


def test_a_16_bit_png_is_converted_to_8_bits_not_a_crash(tmp_path: Path) -> None:
    _write_folder(tmp_path, ("a", "b"), per_class=1, splits=("train", "val"))
    Image.fromarray((np.arange(400).reshape(20, 20) * 150).astype(np.uint16)).save(tmp_path / "train/b/i16.png")
    dm = ImageDataModule(data="folder", data_dir=str(tmp_path), image_size=16, batch_size=3, decode="cpu")
    dm.setup("fit")
    images, sizes, _ = next(iter(dm.train_dataloader()))
    assert images.dtype == torch.uint8 and [20, 20] in sizes.tolist()
    sixteen = images[sizes.tolist().index([20, 20])]
    assert sixteen.float().std() > 30, "the 16-bit gradient survives as 8 bits"


def test_gpu_decode_workers_send_only_the_files_bytes_end_to_end_with_their_lengths(tmp_path: Path) -> None:
    _write_folder(tmp_path, ("a", "b"), per_class=3, splits=("train", "val"))
    (tmp_path / "train" / "a" / "zero.png").write_bytes(b"")
    dm = ImageDataModule(data="folder", data_dir=str(tmp_path), image_size=8, batch_size=7, decode="gpu")
    dm.hparams["num_workers"] = 1
    dm.setup("fit")
    flat, lengths, labels = next(iter(dm.val_dataloader()))  # read by a worker process
    files = sorted((tmp_path / "val").glob("*/*.png"))
    assert flat.dtype == torch.uint8 and flat.ndim == 1 and lengths.tolist() == [p.stat().st_size for p in files]
    assert bytes(flat.numpy()) == b"".join(p.read_bytes() for p in files) and labels.tolist() == [0, 0, 0, 1, 1, 1]
    moved = dm.transfer_batch_to_device((flat, lengths, labels), torch.device("cpu"), 0)
    x, y = dm.on_after_batch_transfer(moved, 0)
    cpu = ImageDataModule(data="folder", data_dir=str(tmp_path), image_size=8, batch_size=7, decode="cpu")
    cpu.setup("fit")
    expected, _ = cpu.on_after_batch_transfer(next(iter(cpu.val_dataloader())), 0)
    assert torch.equal(x, expected) and torch.equal(y, labels), "decoded in the batch = decoded in the worker"
    train = dm.datasets["train"]
    zero = train.samples.index((str(tmp_path / "train" / "a" / "zero.png"), 0))  # type: ignore[union-attr]
    with pytest.warns(UserWarning, match="zero.png: empty file"):
        data, _ = train[zero]
    assert torch.equal(data, train[zero + 1][0]), "the next file takes the unreadable one's place"


def test_folder_source_without_val_is_refused(tmp_path: Path) -> None:
    _write_folder(tmp_path, ("a", "b"), per_class=1, splits=("train",))
    with pytest.raises(ConfigError, match="--data-dir: folder data needs"):
        ImageDataModule(data="folder", data_dir=str(tmp_path))


def _write_fake_cifar10(root: Path, per_batch: int) -> None:
    """The real on-disk layout: latin1 pickles of {'data': N x 3072 uint8, 'labels': [...]}."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            "data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            "labels": [i % 10 for i in range(per_batch)],
        }
        with open(folder / name, "wb") as fh:
            pickle.dump(batch, fh)


def test_cifar10_reads_the_real_format_without_downloading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_fake_cifar10(tmp_path, per_batch=20)

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("prepare_data must not download when the files are there")

    monkeypatch.setattr("torchvision.datasets.CIFAR10", no_download)
    dm = ImageDataModule(data="cifar10", data_dir=str(tmp_path), image_size=32, batch_size=5)
    dm.prepare_data()
    dm.setup("fit")
    assert dm.num_classes == 10
    assert (len(dm.datasets["train"]), len(dm.datasets["val"]), len(dm.datasets["test"])) == (90, 10, 20)
    x, _ = next(iter(dm.val_dataloader()))
    assert x.shape == (5, 3, 32, 32) and x.dtype == torch.uint8


def test_cifar10_downloads_into_data_dir_when_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr("torchvision.datasets.CIFAR10", lambda root, train, download: calls.append((root, download)))
    ImageDataModule(data="cifar10", data_dir=str(tmp_path / "d")).prepare_data()
    assert calls == [(str(tmp_path / "d"), True)]


def test_loader_workers_start_from_a_forkserver_once_cuda_is_initialised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker forked after CUDA is up inherits CUDA tensors (the model, cached batches) and dies when its garbage
    collector frees one (issue #14: bench.py's loader benchmark). Then workers start from a clean forkserver process,
    and must still load real batches, which needs the datasets and collates to pickle."""
    _write_folder(tmp_path, ("a", "b"), per_class=2, splits=("train", "val"))
    folder = ImageDataModule(data="folder", data_dir=str(tmp_path), image_size=8, batch_size=2, decode="gpu")
    synthetic = ImageDataModule(image_size=8, batch_size=2, train_samples=4)
    for dm in (folder, synthetic):
        dm.hparams["num_workers"] = 1
        dm.setup("fit")
    fork = folder.train_dataloader().multiprocessing_context
    assert fork.get_start_method() == "fork", "no CUDA: fork, the fastest start"  # type: ignore[union-attr]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    for dm in (folder, synthetic):
        for loader in (dm.train_dataloader(), dm.val_dataloader()):
            assert loader.multiprocessing_context.get_start_method() == "forkserver"  # type: ignore[union-attr]
        batch = next(iter(dm.train_dataloader()))
        assert len(batch[-1]) == 2
