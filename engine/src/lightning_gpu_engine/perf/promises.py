"""Run-time warnings for the speed promises a task can break without any error: one `warning: ` line each, per run.

A task can undo an engine feature and still train correctly, only slower; nothing would ever say so. `RunPromises`
watches the first training steps for three such breaks and names each once, on global rank 0:
- a metric logged with `prog_bar=True` on every step: the progress bar reads it back, so the CPU waits for the
  device after every step (monitors.py explains why that costs speed);
- a task that declares channels_last whose network is not channels_last where it counts: a 4-D weight, or the 4-D
  input that reaches the network or one of its convolutions;
- with --compile, torch.compile compiling the network again after the first training step of the process, or
  dynamo capturing no graph at all of the networks by then (an LSTM: nothing runs compiled, whatever was asked).
`engine.testing.TaskConformance` fails a task on these lines.
"""

from __future__ import annotations

import re
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn

from lightning_gpu_engine.perf.networks import is_compiled, named_networks

# Training batches of a process that may compile: the first builds the training graph. Evaluation batches compile
# graphs of their own (eval mode, no_grad, a smaller last batch) and are not watched.
WARMUP_BATCHES = 1


def warn(trainer: L.Trainer, message: str) -> None:
    if trainer.is_global_zero:
        print(f"warning: {message}", flush=True)


def step_synced_metrics(trainer: L.Trainer) -> list[str]:
    """Names of the metrics logged so far in this training epoch with both `prog_bar=True` and `on_step=True`."""
    results = getattr(trainer, "_results", None)  # Lightning's result collection of the running loop
    names = []
    for metric in (results or {}).values():
        meta = getattr(metric, "meta", None)
        if meta is not None and meta.prog_bar and meta.on_step and meta.name not in names:
            names.append(meta.name)
    return names


def not_channels_last(tensor: Any) -> bool:
    """A 4-D floating tensor in NCHW order; one whose layouts coincide (one channel, 1x1) counts as channels_last."""
    return (
        isinstance(tensor, torch.Tensor)
        and tensor.ndim == 4
        and tensor.is_floating_point()
        and not tensor.is_contiguous(memory_format=torch.channels_last)
    )


def compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def last_recompile_reason(seen: dict[Any, int]) -> str:
    """Why dynamo compiled again since `seen` (its counts of guard failures per code object), in one line."""
    from torch._dynamo.utils import guard_failures

    for code, reasons in guard_failures.items():
        # one reason per graph kept for the code, newest graph first: the training graph's is the first new one
        new = [str(r).strip() for r in reasons[seen.get(code, 0) :] if str(r).strip()]
        if new:
            return re.sub(r"\s+", " ", new[0].splitlines()[0])
    return ""


class RunPromises(Callback):
    """Warns once per promise a run breaks. channels_last is checked where the engine turned it on for the module
    (`EngineModule.channels_last`: the task declares it and the run has it on)."""

    def __init__(self) -> None:
        self.channels_last = False
        self.warned: set[str] = set()
        self.batches = 0
        self.compiled: list[str] = []  # the networks compiled, by name
        self.graphs = 0
        self.graphs_before: int | None = None  # dynamo's graphs in the process before the first fit began
        self.failures: dict[Any, int] = {}
        self.hooks: list[Any] = []
        self.found: list[str] = []

    def once(self, trainer: L.Trainer, promise: str, message: str) -> None:
        if promise not in self.warned:
            self.warned.add(promise)
            warn(trainer, f"{promise}: {message}")

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.graphs_before is None:  # the first fit: --auto-batch-size's search compiles in fits of its own
            self.graphs_before = compiled_graphs()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.batches = 0
        self.channels_last = bool(getattr(pl_module, "channels_last", False))
        try:
            self.compiled = [name for name, net in named_networks(pl_module).items() if is_compiled(net)]
        except TypeError:  # a module whose networks are not there: nothing compiled (networks.check_module)
            self.compiled = []

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        if self.compiled:
            from torch._dynamo.utils import guard_failures

            self.graphs = compiled_graphs()
            self.failures = {code: len(reasons) for code, reasons in guard_failures.items()}
        net = getattr(pl_module, "net", None)
        if self.batches == 0 and self.channels_last and isinstance(net, nn.Module):
            if not isinstance(trainer.strategy, FSDPStrategy):  # FSDP1 keeps the weights NCHW (module.py)
                self.check_weights(trainer, net)
            if not self.compiled:  # hooks added to a compiled network would themselves make it compile again
                self.watch_inputs(net)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.batches += 1
        for hook in self.hooks:
            hook.remove()
        self.hooks = []
        if self.found:
            self.once(
                trainer,
                "channels_last",
                f"the task declares it, but the input reaching {self.found[0]} in the first training step is NCHW: "
                "the network turns its input back (a .contiguous(), .view() or reshape before the convolution). "
                "Give that layer a channels_last input (.contiguous(memory_format=torch.channels_last)), or do not "
                "declare channels_last",
            )
            self.found = []
        synced = step_synced_metrics(trainer)
        if synced:
            self.once(
                trainer,
                "progress-bar sync",
                f"{', '.join(synced)} is logged with prog_bar=True on every step, so the CPU waits for the device "
                "after each step to show it; drop prog_bar=True (the engine's progress bar shows train/loss on "
                "logging steps)",
            )
        if self.compiled and self.batches == WARMUP_BATCHES and compiled_graphs() == self.graphs_before:
            self.once(
                trainer,
                "compile",
                f"--compile: dynamo captured no graph of {', '.join(self.compiled)} in the first training step, so "
                "nothing runs compiled (compile=off in effect): it leaves what it cannot trace (an RNN, a "
                "data-dependent branch) to eager PyTorch. Declare Task(compile_off=<why>), or name networks it can "
                "trace in Task(networks=...)",
            )
        if self.compiled and self.batches > WARMUP_BATCHES and compiled_graphs() > self.graphs:
            reason = last_recompile_reason(self.failures)
            self.once(
                trainer,
                "compile",
                f"the network was compiled again in training step {trainer.global_step}, after the first"
                + (f" ({reason})" if reason else "")
                + "; each recompilation stalls training. Keep the training batch's shapes, dtypes and the "
                "network's Python state the same from step to step (drop_last=True, no per-step flags)",
            )

    def check_weights(self, trainer: L.Trainer, net: nn.Module) -> None:
        for name, weight in net.named_parameters():
            if not_channels_last(weight):
                self.once(
                    trainer,
                    "channels_last",
                    f"the task declares it, but the weight net.{name} is NCHW in the first training step: the "
                    "network made or replaced it after the engine converted `net` (in configure_model). Build every "
                    "layer in __init__, or do not declare channels_last",
                )
                return

    def watch_inputs(self, net: nn.Module) -> None:
        """Hooks that note the first NCHW input of `net` and of each layer holding a 4-D weight, for one step."""

        def watch(name: str, module: nn.Module) -> None:
            def check(mod: nn.Module, args: tuple[Any, ...]) -> None:
                if not self.found and any(not_channels_last(a) for a in args):
                    self.found.append(f"{name} ({type(mod).__name__})")

            self.hooks.append(module.register_forward_pre_hook(check))

        for name, module in net.named_modules():
            if module is net or any(p.ndim == 4 for p in module.parameters(recurse=False)):
                watch(f"net.{name}" if name else "net", module)
