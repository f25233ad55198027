"""The knobs table's defaults are what a run gets: with no flag but `--precision auto`, a CUDA run trains in bf16
(fp16 with loss scaling before Ampere) with TF32, the compiled network, cuDNN's autotuner and fused AdamW; a CPU run
with none of them but bf16, where the CPU has bf16 units. The CPU twin cannot pass for the GPU form: each expectation
is the accelerator's own."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning_gpu_engine import Config

from .probes import CPU_AND_GPU, fit, network


class KnobRecorder(L.Callback):
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        [optimizer] = trainer.optimizers
        self.knobs = {
            "precision": trainer.precision,
            "fp32 matmul precision": torch.get_float32_matmul_precision(),
            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn.benchmark": torch.backends.cudnn.benchmark,
            "fused AdamW": bool(optimizer.defaults.get("fused")),
            "compiled": getattr(network(pl_module), "_compiled_call_impl", None) is not None,
        }


def amx_or_avx512_bf16() -> bool:
    """Read from /proc/cpuinfo, not from the engine's own probe, so the two can disagree."""
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").is_file() else []
    return "amx_bf16" in flags or "avx512_bf16" in flags


@CPU_AND_GPU
def test_a_run_with_no_knob_flags_gets_the_documented_defaults(
    accelerator: str, tiny_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    unpinned = [a for a in tiny_args if not a.startswith(("--accelerator=", "--precision="))]
    recorder = KnobRecorder()
    fit(monkeypatch, [*unpinned, f"--accelerator={accelerator}", "--precision=auto"], recorder, limit_val_batches=0)
    cuda = accelerator == "cuda"
    bf16 = cuda and torch.cuda.is_bf16_supported()
    cpu_precision = "bf16-mixed" if amx_or_avx512_bf16() else "32-true"
    assert recorder.knobs == {
        # a CPU with bf16 units runs bf16 (measured faster there); others fp32
        "precision": ("bf16-mixed" if bf16 else "16-mixed") if cuda else cpu_precision,
        "fp32 matmul precision": "high",  # --tf32 is on by default
        "cudnn.allow_tf32": True,
        "cudnn.benchmark": cuda,
        "fused AdamW": cuda,  # unfused only for fp16 with --gradient-clip-val, which GradScaler cannot clip fused
        "compiled": cuda and Config().compile is None,  # the bake's answer: unset means on with CUDA
    }
