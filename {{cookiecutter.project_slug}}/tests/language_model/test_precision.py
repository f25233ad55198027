"""--precision bf16-true, a listed choice, reports the language model's losses as the other precisions do: the epoch's
mean is summed in fp32 (the engine's module.py), not in the bf16 that the rest of the module is turned to."""

from __future__ import annotations

from pathlib import Path

import pytest

import train

from .conftest import TINY


def test_bf16_true_tests_the_loss_that_fp32_tests_for_the_same_run(tmp_path: Path) -> None:
    """Three steps, then 300 test batches: summed in bf16 the mean stopped following them after about 256 (the 8 bits
    of bf16's mantissa), and drifted up to 7.06 here where fp32 says 5.71 (8.0000 on a longer test)."""
    run = [*TINY, "--train-tokens=1600000", "--max-steps=3"]  # 1/20 of the tokens is the test split: 300 batches
    loss = {
        p: train.main([*run, f"--precision={p}", f"--output-dir={tmp_path / p}"])["test/loss"]
        for p in ("bf16-true", "32-true")
    }
    assert loss["bf16-true"] == pytest.approx(loss["32-true"], abs=0.05)  # the weights and the losses are bf16's
