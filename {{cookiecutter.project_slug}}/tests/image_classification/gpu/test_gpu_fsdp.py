"""FSDP on one GPU: the whole FSDP path (wrapping, fused AdamW on its parameters, the gathered checkpoint) without
needing two. Its first H100 run crashed at the first optimizer step: channels_last weights got contiguous gradients,
which CUDA's fused AdamW refuses (test_fsdp_layout.py beside this folder checks the strides on the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import ROOT, run_train

from .probes import NEEDS_GPU, assert_loads_where_no_gpu_is_visible, steps_of_the_last_run


@pytest.mark.gpu
@NEEDS_GPU
def test_fsdp_on_one_gpu_trains_resumes_and_its_checkpoint_loads_on_a_cpu(tiny_args: list[str], tmp_path: Path) -> None:
    precision = "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    args = [*tiny_args, "--accelerator=cuda", "--strategy=fsdp", "--devices=1", f"--precision={precision}"]
    args += ["--channels-last"]  # the layout the crash needed: NHWC inputs, and (before the fix) NHWC weights
    first = run_train(*args, "--max-epochs=1")
    assert first.returncode == 0, first.stderr[-3000:]
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"

    resumed = run_train(*args, "--max-epochs=2", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    assert checkpoint["epoch"] == 1 and checkpoint["global_step"] == 8, "4 steps an epoch"
    assert steps_of_the_last_run(tmp_path / "run") == [4, 5, 6, 7], "continued from the saved step, not from zero"

    assert_loads_where_no_gpu_is_visible(last, ROOT)
