"""torch.compile really in effect: the network is compiled, then neither training, validation nor testing recompile it.

Validation switches BatchNorm to eval mode and ends on a smaller batch (only training drops its last one); each may
cost a compile during the first epoch, none after it. On CUDA the graphs go to inductor, as in training, through a
recorder that notes whether each graph is static, so the GPU form checks everything its CPU twin checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lightning as L
import pytest
import torch
from torch import Tensor, nn
from torch._dynamo.utils import counters

from {{ cookiecutter.package_name }}.tasks.image_classification.networks import (
    build_network,
)

from .probes import CPU_AND_GPU, fit, network


class CompileRecorder(L.Callback):
    """Whether the network is compiled, and the frames dynamo compiled in the first epoch, in later ones and in test."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.compiled = getattr(network(pl_module), "_compiled_call_impl", None) is not None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == 1:
            self.first_epoch_frames = counters["frames"]["total"]

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.later_frames = counters["frames"]["total"] - self.first_epoch_frames

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.before_test_frames = counters["frames"]["total"]

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.test_frames = counters["frames"]["total"] - self.before_test_frames


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()  # graphs cached by an earlier test would hide this one's first compiles
    yield
    torch._dynamo.reset()


@CPU_AND_GPU
def test_compiled_network_never_recompiles_after_the_first_epoch_and_matches_eager(
    accelerator: str, tiny_args: list[str], monkeypatch: pytest.MonkeyPatch, fresh_dynamo: None
) -> None:
    static: list[bool] = []

    def record_static(graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        sizes = [s for t in inputs for s in (t.shape if isinstance(t, Tensor) else [t])]
        static.append(not any(isinstance(s, torch.SymInt) for s in sizes))
        if accelerator == "cpu":  # inductor would take minutes on a small CPU; recompiling is dynamo's decision
            return graph.forward
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(graph, inputs)

    compile_network = nn.Module.compile

    def compile_recording(net: nn.Module, mode: str, **kwargs: Any) -> None:  # mode: an inductor preset
        compile_network(net, backend=record_static, **kwargs)

    monkeypatch.setattr(nn.Module, "compile", compile_recording)
    recorder = CompileRecorder()
    # 60 samples: 7 training batches of 8; 12 for validation, so it ends on a batch of 4.
    args = [f"--accelerator={accelerator}", "--precision=bf16-mixed", "--compile", "--train-samples=60"]
    trainer = fit(monkeypatch, [*tiny_args, *args, "--max-epochs=2"], recorder)

    assert recorder.compiled
    assert recorder.first_epoch_frames > 0, "the first epoch compiles the network"
    assert recorder.later_frames == 0, "steady-state training or validation recompiled the network"
    assert recorder.test_frames == 0, "testing (same batch sizes as validation) recompiled the network"
    assert static, "no graph reached the compiler"
    assert all(static), "a batch-size change made the graphs dynamic; the product compiles with dynamic=False"
    # Lightning's teardown hands the module back on the CPU after fit: both networks go to the device under test
    # explicitly, so the comparison runs where training ran.
    net = network(trainer.lightning_module).to(accelerator).eval()
    hp = trainer.lightning_module.hparams
    eager = build_network(hp["model"], len(hp["class_names"]), hp["image_size"])
    eager.load_state_dict(net.state_dict())
    eager.to(accelerator).to(memory_format=torch.channels_last).eval()
    x = torch.randn(8, 3, 16, 16, device=accelerator).contiguous(memory_format=torch.channels_last)
    assert {p.device.type for p in [*net.parameters(), *eager.parameters()]} == {torch.device(accelerator).type}
    with torch.no_grad(), torch.autocast(accelerator, dtype=torch.bfloat16, cache_enabled=False):  # as validation runs
        compiled_out, eager_out = net(x).float(), eager(x).float()
    assert torch.linalg.norm(compiled_out - eager_out) <= 0.05 * torch.linalg.norm(eager_out)
