"""The way to the network: pinned uint8 batches, copied without blocking, arriving channels_last at NHWC weights."""

from __future__ import annotations

from typing import Any

import lightning as L
import pytest
import torch
from torch import Tensor, nn

from train import main

from .probes import CPU_AND_GPU, NEEDS_GPU, fit, layers, network


class LayoutRecorder(L.Callback):
    """During fit: each batch entering the network (channels_last? on which device?), and the conv weights."""

    def __init__(self) -> None:
        self.batches: list[tuple[bool, str]] = []
        self.weights_channels_last: list[bool] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.hook = network(pl_module).register_forward_pre_hook(self.record_batch)
        self.record_weights(pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.hook.remove()
        self.record_weights(pl_module)  # the optimizer's in-place updates keep the layout

    def record_batch(self, _net: nn.Module, args: tuple[Tensor, ...]) -> None:
        self.batches.append((args[0].is_contiguous(memory_format=torch.channels_last), args[0].device.type))

    def record_weights(self, pl_module: L.LightningModule) -> None:
        convs = layers(pl_module, nn.Conv2d)
        self.weights_channels_last += [c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs]


@CPU_AND_GPU
def test_channels_last_weights_and_batches_reach_the_network(
    accelerator: str, tiny_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = LayoutRecorder()
    fit(monkeypatch, [*tiny_args, f"--accelerator={accelerator}", "--channels-last", "--no-compile"], recorder)
    assert recorder.batches == [(True, accelerator)] * 5, "4 training and 1 validation batch, each NHWC on the device"
    assert len(recorder.weights_channels_last) > 20 and all(recorder.weights_channels_last)


@pytest.mark.gpu
@NEEDS_GPU
def test_loader_batches_are_pinned_and_copied_to_the_gpu_without_blocking(
    tiny_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    copies: list[tuple[bool, bool]] = []  # (source pinned, non_blocking) of each image batch sent to the GPU
    to = torch.Tensor.to

    def recording_to(tensor: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        moved = to(tensor, *args, **kwargs)
        if tensor.dtype == torch.uint8 and tensor.device.type == "cpu" and moved.device.type == "cuda":
            copies.append((tensor.is_pinned(), kwargs.get("non_blocking", False)))
        return moved

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    main([*tiny_args, "--accelerator=cuda", "--precision=bf16-mixed", "--no-compile", "--num-workers=auto"])
    assert len(copies) >= 4, "every training batch crosses to the GPU as uint8"
    assert all(pinned for pinned, _ in copies), "loader batches come out of pinned memory"
    assert all(non_blocking for _, non_blocking in copies), "the copy to the GPU is asynchronous"
