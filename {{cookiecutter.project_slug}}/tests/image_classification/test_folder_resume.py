"""Folder data keeps exact resume: the random-resized crops and flips come from the generators checkpoints save."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

import train

from .test_resume import interrupt_at, record_running_accuracy, telling_step


def write_photos(root: Path) -> Path:
    rng = np.random.default_rng(0)
    for split, count in (("train", 16), ("val", 2)):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                size = (int(rng.integers(12, 40)), int(rng.integers(12, 40)), 3)
                suffix = ".jpg" if i % 3 else ".png"
                Image.fromarray(rng.integers(0, 256, size, dtype=np.uint8)).save(root / split / name / f"{i}{suffix}")
    return root


def weights(output_dir: Path) -> dict[str, Any]:
    ckpt = torch.load(output_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    return ckpt["state_dict"]


def test_ctrl_c_mid_epoch_then_resume_ends_with_the_weights_and_metrics_of_an_uninterrupted_folder_run(
    tiny_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_photos(tmp_path / "data")
    args = [*tiny_args, "--data=folder", f"--data-dir={data}", "--max-epochs=2"]  # 4 steps an epoch
    running = record_running_accuracy(monkeypatch)
    expected_metrics = train.main([*args, f"--output-dir={tmp_path / 'whole'}"])
    monkeypatch.undo()
    saved = yaml.safe_load((tmp_path / "whole" / "config.yaml").read_text())
    assert saved["data_dir"] == str(data) and "train_samples" not in saved, "what folder data reads, and only that"

    at = telling_step(running)
    interrupt_at(monkeypatch, at, "ctrl-c")
    with pytest.raises(SystemExit):
        train.main([*args, f"--output-dir={tmp_path / 'stopped'}"])
    monkeypatch.undo()
    metrics = train.main([*args, f"--output-dir={tmp_path / 'stopped'}", "--resume=last"])
    expected, got = weights(tmp_path / "whole"), weights(tmp_path / "stopped")
    for name, weight in expected.items():
        assert torch.equal(got[name], weight), name
    for metric in ("train/loss", "train/acc", "val/loss", "val/acc"):
        assert metrics[metric] == expected_metrics[metric], f"Ctrl-C after step {at}: {metric}"
