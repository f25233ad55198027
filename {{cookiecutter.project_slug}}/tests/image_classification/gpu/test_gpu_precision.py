"""Mixed precision really in effect: bf16 inside the forward pass, and fp16 loss scaling that skips bad steps safely."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins import MixedPrecision
from torch import nn

from {{ cookiecutter.package_name }}.tasks.image_classification import data

from .probes import CPU_AND_GPU, fit, layers


class ForwardRecorder(L.Callback):
    """During training only: the dtype of every convolution and linear output, and each step's loss."""

    def __init__(self) -> None:
        self.dtypes: set[torch.dtype] = set()
        self.losses: list[float] = []
        self.hooks: list[Any] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for layer in [*layers(pl_module, nn.Conv2d), *layers(pl_module, nn.Linear)]:
            self.hooks.append(layer.register_forward_hook(lambda _m, _i, out: self.dtypes.add(out.dtype)))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, *_: Any) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for hook in self.hooks:
            hook.remove()


@CPU_AND_GPU
def test_bf16_mixed_runs_convolutions_and_linears_in_bf16_and_learns_a_fixed_batch(
    accelerator: str, tiny_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data, "random_crop_flip", lambda x, pad: x)  # no augmentation: the very same batch each step
    recorder = ForwardRecorder()
    args = [f"--accelerator={accelerator}", "--precision=bf16-mixed", "--no-compile", "--train-samples=8"]
    trainer = fit(monkeypatch, [*tiny_args, *args, "--max-epochs=5"], recorder, limit_val_batches=0)
    assert trainer.precision == "bf16-mixed"
    assert recorder.dtypes == {torch.bfloat16}
    assert len(recorder.losses) == 5 and all(math.isfinite(loss) for loss in recorder.losses)
    assert recorder.losses[-1] < 0.8 * recorder.losses[0], recorder.losses


class ScalerRecorder(L.Callback):
    """Makes one step's gradients overflow, and counts the steps GradScaler skipped (its scale dropped)."""

    def __init__(self, overflow_at_step: int) -> None:
        self.overflow_at_step = overflow_at_step
        self.scales: list[float] = []
        self.skipped = 0
        self.finite_after_each_step: list[bool] = []

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step == self.overflow_at_step:
            grad = next(pl_module.parameters()).grad
            assert grad is not None
            grad.fill_(math.inf)

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        self.scales.append(trainer.precision_plugin.scaler.get_scale())  # type: ignore[attr-defined]

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        scale = trainer.precision_plugin.scaler.get_scale()  # type: ignore[attr-defined]
        self.skipped += scale < self.scales[-1]
        self.scales.append(scale)
        self.finite_after_each_step.append(all(bool(p.isfinite().all()) for p in pl_module.parameters()))


@CPU_AND_GPU
def test_fp16_loss_scaling_skips_overflowing_steps_and_the_lr_schedule_does_not_run_ahead(
    accelerator: str, tiny_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = ScalerRecorder(overflow_at_step=2)
    args = [*tiny_args, "--no-compile", "--train-samples=48"]
    if accelerator == "cuda":
        trainer = fit(monkeypatch, [*args, "--accelerator=cuda", "--precision=16-mixed"], recorder)
    else:  # Lightning turns 16-mixed into bf16 on the CPU, so the same fp16 autocast and GradScaler go in by hand
        scaler = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
        trainer = fit(monkeypatch, args, recorder, precision=None, plugins=[scaler])
    assert trainer.precision == "16-mixed"
    assert min(recorder.scales) > 1, "gradient scaling is active"
    assert recorder.skipped >= 1 and len(recorder.finite_after_each_step) == trainer.global_step == 6
    assert all(recorder.finite_after_each_step), "an overflowing step must not reach the weights"
    applied = trainer.global_step - recorder.skipped
    assert {int(state["step"]) for state in trainer.optimizers[0].state.values()} == {applied}
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.last_epoch == applied, "the schedule advanced on steps the optimizer skipped"
