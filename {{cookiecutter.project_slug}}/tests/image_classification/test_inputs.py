"""Odd and broken inputs met through train.py and predict.py, as a user meets them: too-long paths, animated images,
unreadable splits, damaged CIFAR-10 copies, broken --config files, nested class folders and symlink loops. Refusals run
in this process through train.py's `main` (tests/test_engine_use.py runs the script's own refusals)."""

from __future__ import annotations

import contextlib
import csv
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import heavy_imports_blocked, one_error_line, run_train
from PIL import Image

from {{ cookiecutter.package_name }}.commands import train

from .trained_model import run_script

CPU = ["--accelerator=cpu", "--precision=32-true"]
TINY = [*CPU, "--strategy=auto", "--num-workers=0", "--logger=csv", "--model=timm/test_resnet", "--image-size=16"]


def refusal(capsys: pytest.CaptureFixture[str], *args: str, early: bool = False) -> str:
    """train.py's one error line for ARGS, exit code 2; `early`: given before torch and Lightning would load."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused, heavy_imports_blocked() if early else contextlib.nullcontext():
        train.main(list(args))
    assert refused.value.code == 2
    return one_error_line(capsys)


def write_png(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((12, 10, 3), value, dtype=np.uint8)).save(path)


def write_animation(path: Path, values: tuple[int, ...]) -> None:
    """An animated GIF or WebP (by the suffix), one flat colour per frame."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = [Image.fromarray(np.full((12, 10, 3), v, dtype=np.uint8)) for v in values]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)


@pytest.mark.parametrize("flag", ["--output-dir", "--data-dir"])
def test_a_path_with_a_name_over_255_bytes_is_one_line_and_nothing_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    long = str(tmp_path / ("x" * 256) / "run")
    args = [f"--output-dir={long}"] if flag == "--output-dir" else ["--data=folder", f"--data-dir={long}"]
    line = refusal(capsys, *TINY, f"--output-dir={tmp_path / 'out'}", *args, early=True)
    assert line.startswith(f"error: {flag}: xxxxx") and "limit is 255" in line, "names the flag and the long name"
    assert list(tmp_path.iterdir()) == []


def test_animated_gif_and_webp_train_and_predict_on_their_first_frame(tmp_path: Path) -> None:
    for split in ("train", "val"):
        for name, value in (("dark", 30), ("light", 220)):
            write_png(tmp_path / "data" / split / name / "still.png", value)
        write_animation(tmp_path / "data" / split / "dark" / "moving.gif", (30, 220, 120))
        write_animation(tmp_path / "data" / split / "light" / "moving.webp", (220, 30, 120))
    run = tmp_path / "run"
    data = ["--data=folder", f"--data-dir={tmp_path / 'data'}", "--batch-size=4", "--max-steps=1"]
    trained = run_train(*TINY, *data, f"--output-dir={run}")
    assert trained.returncode == 0, trained.stderr[-3000:]
    output = tmp_path / "predictions.csv"
    args = [f"--checkpoint={run / 'checkpoints' / 'last.ckpt'}", f"--output={output}", str(tmp_path / "data" / "val")]
    predicted = run_script("predict.py", *CPU, *args)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    with open(output, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(Path(row["path"]).name for row in rows) == ["moving.gif", "moving.webp", "still.png", "still.png"]


def test_a_split_none_of_whose_images_can_be_read_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("a", "b"):
        write_png(tmp_path / "data" / "train" / name / "0.png", 100)
        (tmp_path / "data" / "val" / name).mkdir(parents=True)
        (tmp_path / "data" / "val" / name / "0.png").write_bytes(b"not a png")
    data = ["--data=folder", f"--data-dir={tmp_path / 'data'}", "--batch-size=2"]
    line = refusal(capsys, *TINY, *data, f"--output-dir={tmp_path / 'run'}")
    assert line.startswith(f"error: --data-dir: none of the 2 images in {tmp_path / 'data' / 'val'}/ can be read")
    assert not (tmp_path / "run").exists()


def write_fake_cifar10(root: Path) -> Path:
    """The real on-disk layout, tiny: pickles of {'data': N x 3072 uint8, 'labels': [...]}."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), "labels": [i % 10 for i in range(20)]}
        (folder / name).write_bytes(pickle.dumps(batch))
    return folder


@pytest.mark.parametrize("damage", ["truncated", "empty", "missing"])
def test_a_damaged_cifar10_copy_names_the_file_and_how_to_download_it_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    folder = write_fake_cifar10(tmp_path / "cifar")
    damaged = folder / ("test_batch" if damage == "missing" else "data_batch_1")
    if damage == "missing":
        damaged.unlink()
    else:
        damaged.write_bytes(damaged.read_bytes()[: 1000 if damage == "truncated" else 0])
    run = tmp_path / "run"
    line = refusal(capsys, *TINY, "--data=cifar10", f"--data-dir={tmp_path / 'cifar'}", f"--output-dir={run}")
    assert line.startswith(f"error: --data-dir: {damaged} is {'missing' if damage == 'missing' else 'damaged'}")
    assert f"delete {folder} and run again with a network connection" in line
    assert not run.exists()


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("c.yaml", "lr:\n", "key 'lr' in {path} has no value"),
        ("c.yaml", "model:\n", "key 'model' in {path} has no value"),
        ("c.yaml", "max_steps:\n", "key 'max_steps' in {path} has no value"),
        ("c.yaml", "output_dir:\n", "key 'output_dir' in {path} has no value"),
        ("last.ckpt", b"PK\x03\x04\x80\x81\xff binary zip", "{path} is a binary file, not YAML"),
        ("c.yaml", "lr: 0.1\nmodel: [resnet18\n", "{path}:3:1: "),
    ],
)
def test_a_broken_config_file_is_one_line_naming_file_key_or_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str | bytes, expected: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    line = refusal(capsys, "--config", str(path), f"--output-dir={tmp_path / 'run'}", early=True)
    assert line.startswith(f"error: --config: {expected.format(path=path)}")
    assert not (tmp_path / "run").exists()


def test_class_images_are_found_at_any_depth_and_a_symlink_loop_lists_them_once_with_one_warning(
    tmp_path: Path,
) -> None:
    for split in ("train", "val"):
        root = tmp_path / "data" / split
        for i in range(2):
            write_png(root / "nested" / "deeper" / "deepest" / f"{i}.png", 40)  # no image at the top of the class
            write_png(root / "flat" / f"{i}.png", 200)
        os.symlink(".", root / "flat" / "loop")  # back to the class folder itself
        os.symlink("../..", root / "nested" / "deeper" / "up")  # above it, to the split with every class
    run = tmp_path / "run"
    data = ["--data=folder", f"--data-dir={tmp_path / 'data'}", "--batch-size=2", "--max-epochs=1"]
    result = run_train(*TINY, *data, f"--output-dir={run}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("are symlinks back into folders already listed or above them") == 1, result.stderr
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 2, "4 training images in batches of 2: each listed once"
