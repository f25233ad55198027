"""--ema means the average everywhere: train.py's final test scores the average that the best checkpoint holds, and
predict.py and export.py use it too; a --compile run's checkpoint loads into the uncompiled network of both tools."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from conftest import TINY, run_train
from lightning_gpu_engine import parse_run, read_checkpoint, resolve_hardware

from {{ cookiecutter.package_name }}.tasks.image_classification import (
    TASK,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.export import (
    ServingModel,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.predict import (
    load_classifier,
)

from .test_export import load_exported
from .trained_model import run_script, write_images

# 32 images in batches of 8: 4 steps an epoch; the average keeps half of itself each step
ARGS = [*TINY, "--model=timm/test_resnet", "--max-epochs=2"]
CPU = ["--accelerator=cpu", "--precision=32-true", "--num-workers=0"]
TRAINING_COPY = ("current_model_state", "averaging_state")  # what Lightning's averaging keeps beside the average


def final_test_loss(output_dir: Path) -> float:
    with open(output_dir / "logs" / "version_0" / "metrics.csv", newline="") as file:
        return next(float(row["test/loss"]) for row in csv.DictReader(file) if row.get("test/loss"))


def score(weights: dict[str, torch.Tensor], output_dir: Path) -> float:
    """test/loss of `weights` in a Trainer of their own, with no averaging callback to swap anything."""
    cfg, opts = parse_run([*ARGS, f"--output-dir={output_dir}"], TASK)
    hw = resolve_hardware(cfg, channels_last=TASK.channels_last)
    data = TASK.build_data(cfg, opts, hw)
    model = TASK.build(cfg, opts, hw, data)
    model.load_state_dict(weights)
    plain = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    return float(plain.test(model, datamodule=data, verbose=False)[0]["test/loss"])


@pytest.fixture(scope="module")
def averaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The best checkpoint of an --ema run, whose final test it logged."""
    out = tmp_path_factory.mktemp("ema") / "run"
    done = run_train(*ARGS, "--ema", "--ema-decay=0.5", f"--output-dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "current_model_state" not in done.stdout + done.stderr, "Lightning restored the raw weights for the test"
    [best] = (out / "checkpoints").glob("best-*.ckpt")
    return best


def test_ema_tests_the_average_of_the_best_checkpoint_and_scores_apart_from_the_run_without_it(
    averaged: Path, tmp_path: Path
) -> None:
    saved = read_checkpoint(averaged)
    average, raw = (score(saved[key], tmp_path) for key in ("state_dict", "current_model_state"))
    assert abs(average - raw) > 1e-4, "the average and the raw weights score apart"
    tested = final_test_loss(averaged.parents[1])
    plain = run_train(*ARGS, f"--output-dir={tmp_path / 'plain'}")
    assert plain.returncode == 0, plain.stderr[-3000:]
    # the figures whether or not it passes
    print(f"--ema: test/loss={tested}, its best checkpoint's average {average}, raw weights {raw}")
    print(f"without --ema: test/loss={final_test_loss(tmp_path / 'plain')}")
    assert tested == pytest.approx(average, rel=1e-6, abs=0)
    assert tested != final_test_loss(tmp_path / "plain")


def copy_with(checkpoint: Path, weights: str, path: Path) -> Path:
    """The checkpoint with `weights` (state_dict: the average, or current_model_state: the raw) as its only weights."""
    saved = read_checkpoint(checkpoint)
    saved["state_dict"] = saved[weights]
    torch.save({k: v for k, v in saved.items() if k not in TRAINING_COPY}, path)
    return path


def test_predict_and_export_use_the_average(averaged: Path, tmp_path: Path) -> None:
    write_images(tmp_path / "images", 4, seed=5)
    checkpoints = {
        "ema": averaged,
        "average": copy_with(averaged, "state_dict", tmp_path / "average.ckpt"),
        "raw": copy_with(averaged, "current_model_state", tmp_path / "raw.ckpt"),
    }
    rows = {}
    for name, checkpoint in checkpoints.items():
        output = tmp_path / f"{name}.csv"
        args = [f"--checkpoint={checkpoint}", str(tmp_path / "images"), f"--output={output}", *CPU]
        done = run_script("predict.py", *args)
        assert done.returncode == 0, done.stderr[-3000:]
        rows[name] = output.read_text()
    assert rows["ema"] == rows["average"] != rows["raw"]

    exported = tmp_path / "model.onnx"
    done = run_script("export.py", f"--checkpoint={averaged}", "--format=onnx", f"--output={exported}")
    assert done.returncode == 0, done.stderr[-3000:]
    run, _ = load_exported(exported)
    images = torch.randint(0, 256, (4, 3, 24, 24), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    logits = run(images)
    for name in ("average", "raw"):
        reference = ServingModel(load_classifier(str(checkpoints[name]), channels_last=False, compile=False)).eval()
        with torch.no_grad():
            difference = float((logits - reference(images)).abs().max())
        assert (difference <= 1e-3) == (name == "average"), f"{name}: the exported logits differ by {difference}"


@pytest.mark.slow
def test_a_compiled_runs_checkpoint_has_the_plain_names_and_loads_into_predict_and_export(tmp_path: Path) -> None:
    out = tmp_path / "compiled"
    done = run_train(*ARGS, "--max-epochs=1", "--compile", "--compile-cache=none", f"--output-dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compile=True" in done.stdout
    checkpoint = out / "checkpoints" / "last.ckpt"
    wrapped = [k for k in read_checkpoint(checkpoint)["state_dict"] if "_orig_mod" in k]
    assert not wrapped, f"a compiled network's names: {wrapped[:3]}"  # the networks are compiled in place

    write_images(tmp_path / "images", 2, seed=5)
    output = tmp_path / "predicted.csv"
    done = run_script("predict.py", f"--checkpoint={checkpoint}", str(tmp_path / "images"), f"--output={output}", *CPU)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compile=False" in done.stdout and len(output.read_text().splitlines()) == 1 + 6
    done = run_script("export.py", f"--checkpoint={checkpoint}", "--format=onnx", f"--output={tmp_path / 'm.onnx'}")
    assert done.returncode == 0, done.stderr[-3000:]
