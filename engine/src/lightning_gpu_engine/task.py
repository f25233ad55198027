"""`Task`: what the engine needs from a task to train it, and nothing else; the guide's bring-your-own-task.md has one.

The engine parses the task's options beside its own, resolves the hardware, builds the task's DataModule and
LightningModule, and runs them with every feature it has: precision, compile, DDP/FSDP, SLURM requeue, checkpoints that
survive a kill, exact resume, stop on a signal, throughput and MFU, one-line errors.

Layer 4: imports `config`, `module` and `optimizers`.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import MANUAL, default_value

if TYPE_CHECKING:  # a task module imports this before any option is checked: torch and Lightning load later
    import lightning as L
    from torch import nn

    from lightning_gpu_engine.perf.hardware import Hardware


# The resume vocabulary a task's check_resume speaks (resume_changes.py applies it)
RECORD = "run_record"  # the checkpoint key of the options that trained it
AFRESH = "or start afresh in another --output-dir"
SCHEDULE = "the schedule is recomputed with it, and the rate moves to the new curve from the current step"


# What every run needs: a task cannot declare these not applicable
KEPT = ("output_dir", "resume", "seed", "accelerator", "devices", "num_nodes", "precision", "batch_size", "max_epochs")


def saved_record(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The options and counts a checkpoint was trained with (`RunRecord`); checkpoints from before the engine counted
    any task's samples call `train_items` `train_images`."""
    record = dict(checkpoint.get(RECORD) or {})
    if "train_images" in record:
        record.setdefault("train_items", record.pop("train_images"))
    return record


def first_dim(batch: Any) -> int:
    """Samples in a batch whose first element is a tensor with the batch first, as (inputs, targets) are."""
    first = batch[0] if isinstance(batch, list | tuple) else batch
    return int(first.size(0))


@dataclass(frozen=True)
class Task:
    name: str  # what `train.py --help` says it trains
    # A dataclass of `opt(...)` fields: its flags, YAML keys, --help reasons, checks and saved values, as Config's
    options: type
    # The DataModule and the LightningModule of a run, from both options dataclasses and the resolved hardware. Bad
    # option values raise ConfigError, which the engine prints as one line.
    build_data: Callable[[Config, Any, Hardware], L.LightningDataModule]
    build_model: Callable[[Config, Any, Hardware, L.LightningDataModule], L.LightningModule]
    monitor: str = "val/loss"  # the metric that picks the best checkpoint, and what the summary line reports
    mode: str = "min"  # "max" for an accuracy
    batch_size_fn: Callable[[Any], int] = first_dim  # samples per batch, for the throughput monitor
    # items per batch (its tokens, time steps, ...), as batch_size_fn counts samples per batch: train/items_per_sec
    # and bench.py's items/s divide it by the step time. None: not counted
    length_fn: Callable[[Any], int] | None = None
    unit: str = "samples"  # what the summary line's throughput counts: img, samples, tokens
    # The FSDP unit (sharded, and recomputed with --activation-checkpointing) from the module's network; None: the
    # engine's default, the repeated blocks of `module.net` (trainer.block_types)
    wrap_policy: Callable[[nn.Module], set[type[nn.Module]]] | None = None
    # --strategy fsdp as FSDP2 (sharding.FullyShard: fully_shard per block; CPUs too) rather than FSDP1 (CUDA only)
    fsdp2: bool = False
    # Task-level device choices, decided once the hardware is known (the image task's --decode); printed with it
    resolve: Callable[[Config, Any, Hardware], dict[str, str]] | None = None
    # On --resume, a changed option of the task is refused (with a reason of its own if given here), unless it is named
    # as honoured (with what is done about it) or free
    refused_on_resume: Mapping[str, str] = field(default_factory=dict)
    honoured_on_resume: Mapping[str, str] = field(default_factory=dict)
    free_on_resume: tuple[str, ...] = ()
    # Further checks on --resume, given the checkpoint and the DataModule: raise ConfigError, or return notes to print
    check_resume: Callable[[dict[str, Any], Config, Any, L.LightningDataModule], list[str]] | None = None
    # The task's files (data folders, tokenizers, weights, shard headers) checked before torch and Lightning load, so
    # that a typo answers at once: it imports neither, and raises ConfigError
    check_inputs: Callable[[Config, Any], None] | None = None
    # More for the summary line, from the DataModule (the language model's entropy floor: "floor=1.1140")
    summary: Callable[[L.LightningDataModule], str] | None = None
    # A convolutional network's declaration: the engine then converts `module.net` and its 4-D floating inputs to
    # NHWC (`--channels-last`, offered to such tasks only); elsewhere the layout means nothing
    channels_last: bool = False
    # The task's options that its other choices leave unread (--data-dir with synthetic data): config.yaml leaves them
    # out, so that it says what the run used
    unused_options: Callable[[Any], Collection[str]] | None = None
    # The task's own defaults for engine options ({"batch_size": 4, "lr": 1e-3}): shown in --help, with the reason of
    # any given as TaskDefault(value, why); a --config file and then the flags override them
    defaults: Mapping[str, Any] = field(default_factory=dict)
    # The module's networks, which --compile compiles (each in place, so hooks and DDP stay eager) and MFU counts the
    # FLOPs of: an attribute ("net"), several (("nets.generator", "nets.discriminator"): dotted, through ModuleDicts),
    # or a function of the LightningModule returning them by name
    networks: str | Sequence[str] | Callable[[L.LightningModule], Mapping[str, nn.Module]] = "net"
    # Why --compile does not apply ("dynamo captures no graph of an LSTM"): compile stays off, and the hardware line
    # says `compile=off (<this>)`
    compile_off: str | None = None
    # DDP looks for parameters a step left without a gradient: needed when a step uses only some of them (a GAN's
    # toggle_optimizer freezes the other network), a graph search per backward otherwise
    find_unused_parameters: bool = False
    # Lightning's own strategy by name ("ddp_find_unused_parameters_true", "deepspeed_stage_2"), in place of the
    # engine's DDP on several devices: its exact evaluation split and sharded saves are then not used
    lightning_strategy: str | None = None
    # The module steps its own optimizers (automatic_optimization = False): Lightning then clips and accumulates
    # nothing, so --gradient-clip-val and --accumulate-grad-batches are refused as the flags are read
    manual_optimization: bool = False
    # Engine options that mean nothing to this task, and why ({"weight_decay": "its Adams are its own"}): --help
    # leaves them out, and one given as a flag or a --config key is refused in one line with the reason
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    # The W&B project and MLflow experiment its runs log to; None: the top package of the module defining `options`
    # (the image task's: image_classifier), or the script's name where the script defines them
    project: str | None = None

    def __post_init__(self) -> None:
        if not dataclasses.is_dataclass(self.options):
            raise TypeError(f"Task {self.name!r}: options must be a dataclass of opt(...) fields")
        clash = {f.name for f in dataclasses.fields(self.options)} & set(Config.__dataclass_fields__)
        if clash:
            raise TypeError(f"Task {self.name!r}: options {sorted(clash)} are the engine's own; rename them")
        if self.mode not in ("min", "max"):
            raise TypeError(f"Task {self.name!r}: mode must be 'min' or 'max', not {self.mode!r}")
        unknown = set(self.defaults) - set(Config.__dataclass_fields__)
        if unknown:
            raise TypeError(f"Task {self.name!r}: defaults {sorted(unknown)} are not engine options; see Config")
        if "channels_last" in self.defaults and not self.channels_last:
            raise TypeError(f"Task {self.name!r}: a channels_last default needs channels_last=True")
        odd = set(self.not_applicable) - set(Config.__dataclass_fields__) | set(self.not_applicable) & set(KEPT)
        if odd:
            raise TypeError(f"Task {self.name!r}: not_applicable {sorted(odd)}: not engine options it may go without")
        both = set(self.defaults) & set(self.options_not_applied)
        if both:
            raise TypeError(f"Task {self.name!r}: defaults {sorted(both)} are for options it declares it goes without")
        if self.find_unused_parameters and self.lightning_strategy:
            raise TypeError(f"Task {self.name!r}: give find_unused_parameters or lightning_strategy, not both")

    @property
    def options_not_applied(self) -> dict[str, str]:
        """The engine options this task is without, each with why: its own, the layout without a declaration, and
        the flags Lightning refuses under manual optimization."""
        hidden = {} if self.channels_last else {"channels_last": "the task declares no layout (Task.channels_last)"}
        if self.manual_optimization:
            hidden |= dict.fromkeys(("gradient_clip_val", "accumulate_grad_batches"), MANUAL)
        return {**hidden, **self.not_applicable}

    def build(self, cfg: Config, opts: Any, hw: Hardware, datamodule: L.LightningDataModule) -> L.LightningModule:
        """The task's LightningModule, with the engine's resolved layout on it: what train.py and bench.py run."""
        model = self.build_model(cfg, opts, hw, datamodule)
        model.engine_networks = self.networks  # type: ignore[assignment]  # what networks.py compiles and counts
        if hw.channels_last:  # EngineModule.configure_model converts the network and hooks its inputs
            model.channels_last = True  # type: ignore[assignment]
        if cfg.optimizer == "muon":
            from lightning_gpu_engine.module import engine_built_optimizer
            from lightning_gpu_engine.optimizers import check_muon

            check_muon(model, engine_built_optimizer(model))
            model.muon_lr = cfg.muon_lr  # type: ignore[assignment]
        return model

    @property
    def tracker_project(self) -> str:
        package = self.options.__module__.split(".")[0]
        return self.project or (Path(sys.argv[0]).stem if package == "__main__" else package)

    @property
    def default_values(self) -> dict[str, Any]:
        """The task's defaults without their reasons: where its engine options start."""
        return {name: default_value(given) for name, given in self.defaults.items()}

    @property
    def test_metric(self) -> str:
        """The monitored metric as the final test logs it: val/acc -> test/acc."""
        return "test/" + self.monitor.split("/", 1)[-1]
