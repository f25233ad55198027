"""End to end on CPU: the script, two DDP processes over gloo, and resuming from the last checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml
from conftest import run_train

from train import main


def test_fast_dev_run_end_to_end_as_a_user_runs_it(tiny_args: list[str], tmp_path: Path) -> None:
    result = run_train(*tiny_args, "--fast-dev-run")
    assert result.returncode == 0, result.stderr[-3000:]
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    # channels_last is the bake's default (tiny_args leaves it alone); CPU turns compile off.
    expected = f"hardware: cpu x1 | precision=32-true compile=False channels_last={saved['channels_last']}"
    assert expected in result.stdout
    assert "test/acc=" in result.stdout
    assert saved["image_size"] == 16 and saved["fast_dev_run"] is True


def test_two_process_ddp_on_cpu(tiny_args: list[str]) -> None:
    result = run_train(*tiny_args, "--devices=2", "--strategy=ddp", "--fast-dev-run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "hardware: cpu x2" in result.stdout
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in result.stdout + result.stderr


def test_resume_last_continues_from_the_last_epoch(tiny_args: list[str], tmp_path: Path) -> None:
    first = main([*tiny_args, "--train-samples=64", "--max-epochs=2"])
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 16 and checkpoint["epoch"] == 1
    assert checkpoint["hyper_parameters"]["num_classes"] == 6
    assert first["val/acc"] >= 0 and "test/acc" in first

    resumed = main([*tiny_args, "--train-samples=64", "--max-epochs=3", "--resume=last"])
    checkpoint = torch.load(last, map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 24 and checkpoint["epoch"] == 2
    assert "test/acc" in resumed
