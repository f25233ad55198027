"""The honest transfer check, offline: features learnt on one synthetic task speed up learning a different one.

Task A is the built-in synthetic shapes (circles, squares, ... on noisy backgrounds). Task B is new: strokes of four
orientations (horizontal, vertical, two diagonals) in other colours, given as a folder of PNG files. A network trained
on A is saved as a plain state_dict and fine-tuned on B with `--pretrained FILE`; the same run from scratch must take
more steps to reach the same validation accuracy.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.io import write_png

import train

MODEL = "timm/test_resnet"  # a 0.5M-parameter ResNet of timm's, with a stem that no small-image surgery touches
SIZE = 32
TARGET = 0.65  # well below where fine-tuning levels off (~0.73), out of reach from scratch (<0.45)
ORIENTATIONS = ("horizontal", "vertical", "diagonal", "antidiagonal")


def write_strokes(root: Path, per_class: int, seed: int) -> None:
    """root/<orientation>/<i>.png: one stroke of random length, width, place and colour on a noisy background."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:SIZE, 0:SIZE] + 0.5
    for label, name in enumerate(ORIENTATIONS):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            cy, cx = rng.uniform(SIZE * 0.3, SIZE * 0.7, 2)
            half, width = rng.uniform(SIZE * 0.25, SIZE * 0.4), rng.uniform(1.5, 3.5)
            angle = np.pi / 4 * (0, 2, 1, 3)[label] + rng.normal(0, 0.08)
            along = (x - cx) * np.cos(angle) + (y - cy) * np.sin(angle)
            across = -(x - cx) * np.sin(angle) + (y - cy) * np.cos(angle)
            mask = (np.abs(along) <= half) & (np.abs(across) <= width)
            background = rng.uniform(0, 255, (3, 1, 1))
            colour = np.where(background > 127, background - rng.uniform(80, 140, (3, 1, 1)), background + 100)
            pixels = np.where(mask, colour, background) + rng.normal(0, 12, (3, SIZE, SIZE))
            image = torch.from_numpy(np.clip(pixels, 0, 255).astype(np.uint8))
            write_png(image, str(root / name / f"{i}.png"))


def steps_to_target(output_dir: Path) -> int | None:
    """The first optimizer step after which validation accuracy reached TARGET, from the CSV log."""
    rows = list(csv.DictReader((output_dir / "logs" / "version_0" / "metrics.csv").open()))
    reached = [int(r["step"]) + 1 for r in rows if r.get("val/acc") and float(r["val/acc"]) >= TARGET]
    return min(reached) if reached else None


@pytest.mark.slow
def test_weights_pretrained_on_shapes_reach_the_target_on_strokes_in_fewer_steps(tmp_path: Path) -> None:
    common = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--num-workers=0", "--logger=csv"]
    common += [f"--model={MODEL}", f"--image-size={SIZE}", "--log-every-n-steps=1"]
    shapes = ["--train-samples=2560", "--batch-size=32", "--max-epochs=6", "--lr=4e-3"]  # to val/acc ~1.0
    train.main([*common, *shapes, f"--output-dir={tmp_path / 'shapes'}"])
    checkpoint = torch.load(tmp_path / "shapes" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    weights = {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    torch.save(weights, tmp_path / "shapes.pt")  # a plain state_dict, as any other tool would save one

    write_strokes(tmp_path / "strokes" / "train", per_class=32, seed=1)  # few images: where pretraining matters
    write_strokes(tmp_path / "strokes" / "val", per_class=32, seed=2)
    task_b = [*common, "--data=folder", f"--data-dir={tmp_path / 'strokes'}", "--batch-size=16", "--lr=3e-3"]
    task_b += ["--max-epochs=15"]  # 8 steps an epoch, validated after each
    train.main([*task_b, f"--pretrained={tmp_path / 'shapes.pt'}", f"--output-dir={tmp_path / 'fine-tuned'}"])
    train.main([*task_b, f"--output-dir={tmp_path / 'scratch'}"])

    pretrained, scratch = steps_to_target(tmp_path / "fine-tuned"), steps_to_target(tmp_path / "scratch")
    print(f"steps to val/acc >= {TARGET}: pretrained {pretrained}, from scratch {scratch}")
    assert pretrained is not None, "fine-tuning reached the target"
    assert scratch is None or pretrained < scratch
