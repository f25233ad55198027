"""The networks of any LightningModule, as its Task names them (`Task.networks`): what --compile compiles and what
MFU counts the FLOPs of. `self.net` of an EngineModule by default; a GAN's generator and discriminator; whatever a
function of the module returns. Also the checks of a built module's shape against the run's options.

Each network is compiled in place (nn.Module.compile), not the LightningModule: self.log, hooks and DDP stay eager,
and state_dict keys keep their names. An EngineModule compiles in configure_model (after FSDP2 shards its blocks); any
other module is compiled by `CompileNetworks` when fit starts, after its configure_model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import lightning as L
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.callbacks import Callback
from torch import Tensor, nn

from lightning_gpu_engine.config.cli import note
from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import MANUAL, ConfigError
from lightning_gpu_engine.perf.hardware import Hardware

if TYPE_CHECKING:  # a Task's fields are read here; task.py builds modules with this one
    from lightning_gpu_engine.task import Task


def declared(module: nn.Module) -> Any:
    """The Task's `networks` (Task.build puts them on the module), else "net"."""
    return getattr(module, "engine_networks", "net")


def named_networks(module: nn.Module) -> dict[str, nn.Module]:
    """The module's networks by name, as its Task declares them; TypeError naming what is missing."""
    names = declared(module)
    if callable(names):
        return dict(names(module))
    found: dict[str, nn.Module] = {}
    for name in [names] if isinstance(names, str) else list(names):
        net: Any = module
        for part in name.split("."):
            net = getattr(net, part, None)
        if not isinstance(net, nn.Module):
            has = ", ".join(n for n, _ in module.named_children()) or "none"
            raise TypeError(
                f"{type(module).__name__} has no network {name!r} (its modules: {has}); name the networks to compile "
                "and count in Task(networks=...)"
            )
        found[name] = net
    return found


def is_compiled(net: nn.Module) -> bool:
    return getattr(net, "_compiled_call_impl", None) is not None


def compile_networks(module: nn.Module, mode: str) -> None:
    """Compiles each named network in place, once.

    dynamic=False: training batches share one size (drop_last) but evaluation's last batch is smaller, and by default
    dynamo answers a new size by making the batch dimension symbolic, also in the training graph compiled after it,
    which then loses its static-shape kernels. Instead each size gets its own graph."""
    for net in named_networks(module).values():
        if not is_compiled(net):
            net.compile(mode=mode, dynamic=False)


class CompileNetworks(Callback):
    """--compile for any LightningModule, once its configure_model has run: the networks not compiled yet (an
    EngineModule compiles its own in configure_model, before FSDP wraps them)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        compile_networks(pl_module, self.mode)


def network_flops(meta: nn.Module, example: Any) -> int:
    """Forward and backward FLOPs of a network on the meta device, on `example` (a tensor, or a tuple of the
    forward's arguments) moved there: nothing allocated or computed."""
    given = example if isinstance(example, tuple) else (example,)
    args = tuple(a.to("meta") if isinstance(a, Tensor) else a for a in given)
    return measure_flops(meta, lambda: meta(*args), lambda out: out.sum())


def module_flops(module: nn.Module, example: Any, meta_network: Callable[[], nn.Module] | None = None) -> int:
    """FLOPs per training batch: each named network's forward and backward once, on `example` (the module's
    `example_input(batch_size)`: one input for one network, or a mapping of network name to input); 0 with a note
    where they cannot be counted. `meta_network`: the one network on the meta device, made by the module itself."""
    nets: dict[str, nn.Module] = {}
    try:
        nets = named_networks(module)
        examples = dict(example) if isinstance(example, Mapping) else dict.fromkeys(nets, example)
        if sorted(examples) != sorted(nets):
            raise TypeError(f"example_input gives inputs for {sorted(examples)}, not for {sorted(nets)}")
        flops = 0
        for name, given in examples.items():
            own = meta_network() if meta_network is not None and len(nets) == 1 else None
            flops += network_flops(own or copy.deepcopy(nets[name]).to("meta"), given)
        return flops
    except Exception as err:  # an op without a meta kernel, a constructor needing real numbers, a mismatch
        names = ", ".join(f"{name} ({type(net).__name__})" for name, net in nets.items()) or "the networks"
        note(f"FLOPs of {names} cannot be counted on the meta device ({type(err).__name__}: {err}); no MFU logged")
        return 0


def batch_flops(module: nn.Module, batch_size: int | None) -> int:
    """FLOPs per training batch, for the throughput monitor and bench.py: an EngineModule's count (its
    `count_flops`, which a task may override), else the module's networks counted on its `example_input`."""
    counted = getattr(module, "flops_per_batch", None)
    if counted is not None:
        return int(counted)
    make = getattr(module, "example_input", None)
    example = make(batch_size) if callable(make) and batch_size else None
    return module_flops(module, example) if example is not None else 0


def check_module(task: Task, model: L.LightningModule, cfg: Config, hw: Hardware) -> tuple[Hardware, list[str]]:
    """The built module against the run's options, before a Trainer exists: the hardware as it applies to this
    module, and the promise broken (for a `warning: ` line). ConfigError for a flag that Lightning would refuse with a
    traceback once the model is set up."""
    # Lightning refuses these for a module that steps its own optimizers, in 30 lines once the model is set up
    flags = {"gradient_clip_val": cfg.gradient_clip_val > 0, "accumulate_grad_batches": cfg.accumulate_grad_batches > 1}
    given = [name for name, on in flags.items() if on]
    if given and not model.automatic_optimization:
        raise ConfigError(given[0], f"{type(model).__name__}: {MANUAL}; declare Task(manual_optimization=True)")
    if not hw.compile:
        return hw, []
    try:
        named_networks(model)
    except TypeError as err:
        if task.networks != "net":  # a declaration that names what the module does not have
            raise ConfigError("compile", f"Task {task.name!r}: {err}") from None
        off = f"{type(model).__name__} has no net: name its networks in Task(networks=...)"
        return replace(hw, compile=False, compile_off=off), [f"compile: --compile compiles nothing: {err}"]
    return hw, []
