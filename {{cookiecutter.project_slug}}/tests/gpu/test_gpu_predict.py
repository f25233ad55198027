"""predict.py on a GPU with the GPU defaults (bf16, channels_last, compile) labels as fp32 on the CPU does."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from probes import NEEDS_GPU
from trained_model import run_script, trained_checkpoint


def predicted(path: Path) -> dict[str, str]:
    with open(path, newline="") as fh:
        return {row["path"]: row["predicted"] for row in csv.DictReader(fh)}


@pytest.mark.gpu
@NEEDS_GPU
def test_bf16_gpu_predictions_agree_with_fp32_cpu_on_the_top_class(tmp_path: Path) -> None:
    checkpoint, held = trained_checkpoint(tmp_path / "tiny-classifier")
    folder = tmp_path / "tiny-classifier" / "held"
    outputs = {}
    for name, flags in {
        "cpu": ["--accelerator=cpu", "--precision=32-true"],
        "gpu": ["--accelerator=cuda", "--precision=bf16-mixed", "--channels-last", "--compile"],
    }.items():
        outputs[name] = tmp_path / f"{name}.csv"
        args = [f"--checkpoint={checkpoint}", str(folder), f"--output={outputs[name]}", *flags]
        result = run_script("predict.py", *args)
        assert result.returncode == 0, result.stderr[-3000:]
        assert ("precision=bf16-mixed compile=True" in result.stdout) == (name == "gpu")
    cpu, gpu = predicted(outputs["cpu"]), predicted(outputs["gpu"])
    assert list(cpu) == list(gpu) and len(cpu) == len(held)
    agree = sum(cpu[path] == gpu[path] for path in cpu)
    assert agree >= 0.95 * len(cpu), f"bf16 on the GPU and fp32 on the CPU agree on {agree} of {len(cpu)} images"
