"""The fine-tuning recipe through train.py: the frozen first epochs, and EMA of the weights on and off."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import train

from .conftest import imagenet_like_resnet18


@pytest.mark.parametrize("freeze_epochs", [1, 0])
def test_freeze_epochs_keep_the_backbone_bit_for_bit_while_the_head_learns(
    freeze_epochs: int, tiny_args: list[str], tmp_path: Path
) -> None:
    saved = imagenet_like_resnet18(tmp_path / "weights.pt")
    flags = [f"--pretrained={tmp_path / 'weights.pt'}", f"--freeze-epochs={freeze_epochs}", "--warmup-fraction=0"]
    train.main([*tiny_args, *flags])
    trained = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    net = {k.removeprefix("net."): v for k, v in trained["state_dict"].items() if k.startswith("net.")}
    assert net["fc.weight"].abs().sum() > 0, "the zero-initialised head trained"
    backbone = [k for k in saved if not k.startswith("fc.")]
    unchanged = [k for k in backbone if torch.equal(net[k], saved[k])]
    if freeze_epochs:
        assert unchanged == backbone, "weights, BatchNorm statistics and counters all as loaded"
    else:
        assert len(unchanged) < len(backbone) // 2, "without freezing the backbone trains from the first step"


@pytest.mark.parametrize("ema", [True, False])
def test_ema_validates_and_checkpoints_the_averaged_weights(ema: bool, tiny_args: list[str], tmp_path: Path) -> None:
    train.main([*tiny_args, "--ema" if ema else "--no-ema", "--ema-decay=0.5", "--max-epochs=2"])
    checkpoints = sorted((tmp_path / "run" / "checkpoints").glob("*.ckpt"))
    assert len(checkpoints) >= 2, "the best and the last"
    for path in checkpoints:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        if not ema:
            assert "current_model_state" not in checkpoint
            continue
        averaged, current = checkpoint["state_dict"], checkpoint["current_model_state"]
        assert averaged.keys() == current.keys()
        assert not torch.equal(averaged["net.fc.weight"], current["net.fc.weight"]), "saved weights are the average"
