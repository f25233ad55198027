"""Whole runs on GPUs: a checkpoint that moves to a CPU-only machine and back, and DDP/FSDP from 1 and 2 GPUs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, run_train

import train

from .probes import NEEDS_GPU, NEEDS_GPUS, assert_loads_where_no_gpu_is_visible, steps_of_the_last_run

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


@pytest.mark.gpu
@NEEDS_GPU
def test_gpu_checkpoint_loads_where_no_gpu_is_visible_and_resumes_on_the_gpu(
    tiny_args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*tiny_args, "--accelerator=cuda", "--precision=bf16-mixed", "--compile"]
    train.main([*args, "--max-epochs=1"])
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"

    assert_loads_where_no_gpu_is_visible(last, ROOT)

    capsys.readouterr()
    train.main([*args, "--max-epochs=2", "--resume=last"])
    assert re.search(r"hardware: .+ x1 \| precision=bf16-mixed compile=True", capsys.readouterr().out)
    checkpoint = torch.load(last, map_location="cpu", weights_only=False)
    assert checkpoint["epoch"] == 1 and checkpoint["global_step"] == 8, "4 steps an epoch"
    assert steps_of_the_last_run(tmp_path / "run") == [4, 5, 6, 7], "continued from the saved step, not from zero"


@pytest.mark.gpu
@NEEDS_GPU
def test_ddp_strategy_on_a_single_gpu(tiny_args: list[str]) -> None:
    args = ["--accelerator=cuda", "--strategy=ddp", "--devices=1", "--precision=bf16-mixed", "--no-compile"]
    result = run_train(*tiny_args, *args, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1" in output and "distributed_backend=nccl" in output
    assert re.search(r"hardware: .+ x1 \|", result.stdout) and "test/acc=" in result.stdout


@pytest.mark.multigpu
@pytest.mark.multiprocess
@NEEDS_GPUS
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_validation_metrics_are_identical_on_every_rank(strategy: str, tiny_args: list[str], tmp_path: Path) -> None:
    # Each rank validates its own half of the data, so only properly synced metrics can agree.
    args = ["--accelerator=cuda", "--devices=2", f"--strategy={strategy}", "--precision=bf16-mixed", "--no-compile"]
    script = ROOT / "tests" / "image_classification" / "dump_ranks.py"  # see that script
    dump_ranks = [sys.executable, str(script), str(tmp_path / "dump")]
    result = subprocess.run(
        [*dump_ranks, *tiny_args, *args, "--train-samples=64", "--max-epochs=2"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [torch.load(tmp_path / "dump" / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert ranks[0]["global_step"] == 8, "64 samples / (batch 8 x 2 ranks) x 2 epochs"
    validation = [{k: v for k, v in rank["metrics"].items() if k.startswith("val/")} for rank in ranks]
    assert {"val/acc", "val/loss"} <= validation[0].keys()
    assert validation[0] == validation[1]
