"""Every way the image task's inputs can be wrong says so in one line, naming the cause and what to try (the
engine's failures are lightning-gpu-engine's tests/test_failures.py's)."""

from __future__ import annotations

import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import one_error_line
from PIL import Image

import train
from {{ cookiecutter.package_name }}.tasks.image_classification.data import (
    ImageDataModule,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.module import (
    ImageClassifier,
)


def write_images(root: Path, layout: dict[str, int]) -> Path:
    """`layout` maps 'split/class' to a number of small PNGs written there."""
    rng = np.random.default_rng(0)
    for folder, count in layout.items():
        (root / folder).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(root / folder / f"{i}.png")
    return root


# Each case: extra flags (given tmp_path) and what the one error line must say. All fail before the run starts.
BAD_INPUT: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "missing data dir": (
        lambda tmp: ["--data", "folder", "--data-dir", str(tmp / "nowhere")],
        "--data-dir: folder data needs",
    ),
    "one class": (
        lambda tmp: ["--data", "folder", "--data-dir", str(write_images(tmp / "d", {"train/a": 1, "val/a": 1}))],
        "needs at least 2 class folders, found ['a']",
    ),
    "class without images": (
        lambda tmp: [
            "--data",
            "folder",
            "--data-dir",
            str(write_images(tmp / "d", {"train/a": 1, "train/b": 0, "val/a": 1, "val/b": 1})),
        ],
        "--data-dir: no images in",
    ),
    "val classes differ": (
        lambda tmp: [
            "--data",
            "folder",
            "--data-dir",
            str(write_images(tmp / "d", {"train/a": 1, "train/b": 1, "val/a": 1, "val/c": 1})),
        ],
        "val/ has class folders ['a', 'c'], but train/ has ['a', 'b']",
    ),
    "image too small for the model": (
        lambda _: ["--model", "alexnet"],
        "--image-size: 16 px is too small for alexnet; try --image-size 64",
    ),
    "1 px images": (lambda _: ["--image-size", "1"], "--image-size: must be from 16 to 4096 px, got 1"),
    "2 px images": (lambda _: ["--image-size", "2"], "--image-size: must be from 16 to 4096 px, got 2"),
    "huge images": (lambda _: ["--image-size", "100000"], "--image-size: must be from 16 to 4096 px, got 100000"),
    "unknown model": (
        lambda _: ["--model", "resnet19"],
        "--model: unknown model 'resnet19'; closest: resnet18",
    ),
    "detection model": (
        lambda _: ["--model", "fasterrcnn_resnet50_fpn"],
        "--model: 'fasterrcnn_resnet50_fpn' is a torchvision detection model, not an image classifier",
    ),
    "fewer images than a batch": (
        lambda _: ["--train-samples", "7"],
        "--batch-size: 8 is more than the 7 training images: nothing would be trained",
    ),
    "folder with fewer images than a batch": (
        lambda tmp: [
            "--data",
            "folder",
            "--data-dir",
            str(write_images(tmp / "d", {"train/a": 3, "train/b": 3, "val/a": 1, "val/b": 1})),
        ],
        "--batch-size: 8 is more than the 6 training images",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUT.keys())
def test_bad_input_is_one_line_exit_2_and_leaves_no_output_dir(
    case: str, tiny_args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    flags, expected = BAD_INPUT[case]
    for launcher in ("SLURM_NTASKS", "SLURM_JOB_NAME", "TORCHELASTIC_RUN_ID", "NODE_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(launcher, raising=False)  # as on a plain machine, even where the tests run under one
    with pytest.raises(SystemExit) as exit_info:
        train.main([*tiny_args, *flags(tmp_path)])
    assert exit_info.value.code == 2
    assert expected in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_cifar10_that_cannot_be_downloaded_names_the_data_dir(
    tiny_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr("torchvision.datasets.CIFAR10", offline)
    with pytest.raises(SystemExit) as exit_info:
        train.main([*tiny_args, "--data=cifar10", f"--data-dir={tmp_path / 'cifar'}"])
    assert exit_info.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: --data-dir: CIFAR-10 is not in {tmp_path / 'cifar'} and the download failed")
    assert "no network" in line


def test_an_unreadable_image_is_skipped_with_a_warning_naming_it(tmp_path: Path) -> None:
    root = write_images(tmp_path, {"train/a": 2, "train/b": 2, "val/a": 1, "val/b": 1})
    (root / "train" / "a" / "broken.png").write_bytes(b"not a png")
    dm = ImageDataModule(data="folder", data_dir=str(root), image_size=8)
    dm.setup("fit")
    train = dm.datasets["train"]
    broken = [path for path, _ in train.samples].index(str(root / "train" / "a" / "broken.png"))  # type: ignore[union-attr]
    with pytest.warns(UserWarning, match=r"skipping unreadable image .*broken\.png: Unsupported"):
        image, label = train[broken]
    neighbour, neighbour_label = train[broken + 1]
    assert torch.equal(image, neighbour) and label == neighbour_label


def test_out_of_memory_names_the_batch_size_and_how_to_lower_it(
    tiny_args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def out_of_memory(self: ImageClassifier, batch: Any, batch_idx: int) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(ImageClassifier, "training_step", out_of_memory)
    with pytest.raises(SystemExit) as exit_info:
        train.main(tiny_args)
    assert exit_info.value.code == 1
    line = one_error_line(capsys)
    assert line.startswith("error: --batch-size: out of memory with 8 images per device; lower it")
    assert "--batch-size 4 --accumulate-grad-batches 2 keeps the global batch" in line
