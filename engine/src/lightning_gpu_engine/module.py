"""`EngineModule`: the LightningModule base that gives a task's network the engine's speed features.

A subclass builds its network as `self.net`, saves the options of `run_hparams(cfg, hw)` among its hparams, and
writes one `shared_step(batch, stage)` that returns the loss: training, validation and test all run it. It then gets:
- torch.compile of `self.net`, or of the networks its Task names (not of the LightningModule, so self.log, hooks and
  DDP stay in eager Python);
- AdamW, fused where Lightning can still clip its gradients, with decay kept off norms, biases and embeddings;
  the names are recorded before FSDP turns every parameter into a flat 1-D shard; or, with `--optimizer muon`, Muon
  for the 2-D hidden weights and AdamW for the rest (optimizers.py);
- linear warm-up then cosine decay per optimizer step, which under 16-mixed skips the steps GradScaler skipped;
- MFU: `example_input(batch_size)` is counted on the meta device, and the throughput monitor divides it by time;
- for a task that declares channels_last (`Task.channels_last`), `self.net` and its 4-D floating inputs in NHWC.

Layer 3: imports `config`, `optimizers` and `perf`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import FSDPStrategy
from lightning.pytorch.utilities.types import LRSchedulerTypeUnion
from torch import Tensor, nn
from torch.optim import Optimizer
from torchmetrics import Metric

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import parse_betas
from lightning_gpu_engine.optimizers import MuonWithAdamW, muon_names, no_decay_names, split_for_muon
from lightning_gpu_engine.perf.hardware import Hardware
from lightning_gpu_engine.perf.networks import compile_networks, module_flops

# FSDP and activation checkpointing insert these into parameter names; our names are recorded before wrapping.
WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
TORCH_BETAS = (0.9, 0.999)  # AdamW's own, for a module whose hparams do not name them


def run_hparams(cfg: Config, hw: Hardware) -> dict[str, Any]:
    """The engine's options an EngineModule reads from its hparams: pass them to its __init__ and save them."""
    return dict(
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        betas=list(parse_betas(cfg.betas)),  # a list: hparams.yaml and every tracker take it as it is
        warmup_fraction=cfg.warmup_fraction,
        compile=hw.compile,
        compile_mode=cfg.compile_mode,
    )


def clean_name(name: str) -> str:
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name.removeprefix("net.")


def warmup_cosine(total: int, warmup: int) -> Callable[[int], float]:
    """Learning-rate multiplier per step: linear warm-up to 1, then cosine down to 0 at `total`."""

    def multiplier(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    return multiplier


def to_channels_last(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A forward pre-hook: 4-D floating inputs in NHWC, whatever layout the loader or a transform left them in (a
    no-op for those already in it)."""
    return tuple(
        a.contiguous(memory_format=torch.channels_last)
        if isinstance(a, Tensor) and a.ndim == 4 and a.is_floating_point()
        else a
        for a in args
    )


class EngineModule(L.LightningModule):
    net: nn.Module
    # Set by Task.build when the task declares channels_last and the run has it on: configure_model converts
    channels_last = False
    muon_lr: float | None = None  # set by Task.build with --optimizer muon: Muon's peak rate for the hidden weights

    def __init__(self) -> None:
        super().__init__()
        self.no_decay: set[str] | None = None  # names under self.net; configure_model records them if unset
        self.flops_per_batch = 0  # set in setup; the throughput monitor divides it by step time for MFU
        self.loss_scale: float | None = None  # 16-mixed: GradScaler's scale after the last optimizer step
        self._layout_hook: Any = None  # the channels_last pre-hook's handle, once registered

    def shared_step(self, batch: Any, stage: str) -> Tensor:
        """The loss of `batch`, logging `{stage}/...` metrics; stage is "train", "val" or "test"."""
        raise NotImplementedError(f"{type(self).__name__} must define shared_step(batch, stage) -> loss")

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self.shared_step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.shared_step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.shared_step(batch, "test")

    def example_input(self, batch_size: int) -> Tensor | Mapping[str, Any] | None:
        """One batch of `self.net`'s input, for counting FLOPs (a meta tensor will do), or of each network the Task
        names, by name; None: no MFU."""
        return None

    def meta_network(self) -> nn.Module:
        """`self.net` on the meta device; a task that can build its network there directly may say so here."""
        return copy.deepcopy(self.net).to("meta")

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        batch_size = getattr(datamodule, "hparams", {}).get("batch_size")
        # --fast-dev-run checks the wiring with one step: no throughput window, so no MFU to count FLOPs for.
        if stage == "fit" and batch_size and not getattr(self.trainer, "fast_dev_run", False):
            self.flops_per_batch = self.count_flops(batch_size)

    def count_flops(self, batch_size: int) -> int:
        """FLOPs per training batch of the Task's networks (`self.net` unless it names others), on `example_input`."""
        example = self.example_input(batch_size)
        return 0 if example is None else module_flops(self, example, self.meta_network)

    def recorded_no_decay(self) -> set[str]:
        """The no-decay names under self.net, recorded on first use: configure_model uses it before FSDP wraps."""
        if self.no_decay is None:
            self.no_decay = no_decay_names(self.net)
        return self.no_decay

    def configure_model(self) -> None:
        self.recorded_no_decay()
        strategy = self._trainer.strategy if self._trainer is not None else None
        if self.channels_last:
            self._use_channels_last(fsdp1=isinstance(strategy, FSDPStrategy))
        parallelize = getattr(strategy, "parallelize", None)
        if parallelize is not None:  # FSDP2 (sharding.FullyShard): the blocks are sharded before they are compiled
            parallelize(self.net)
        if self.hparams.get("compile"):  # the Task's networks, each in place (networks.py)
            compile_networks(self, self.hparams.get("compile_mode", "default"))

    def _use_channels_last(self, fsdp1: bool) -> None:
        # FSDP1 (use_orig_params) gives a channels_last weight a contiguous gradient, which CUDA's fused AdamW refuses
        # for its differing strides: there the weights keep the default layout and only the inputs are NHWC.
        if not fsdp1:
            self.net.to(memory_format=torch.channels_last)  # in place: 4-D weights only
        if self._layout_hook is None:  # before compile, so the compiled call includes it
            self._layout_hook = self.net.register_forward_pre_hook(to_channels_last)

    def param_groups(self) -> list[dict[str, Any]]:
        """AdamW groups: decayed, then not decayed. Told apart by the recorded names: under FSDP every parameter is
        already a flat 1-D shard when the optimizer is built, and module types are hidden."""
        no_decay = self.recorded_no_decay()
        decay: dict[bool, list[nn.Parameter]] = {True: [], False: []}
        for name, p in self.named_parameters():
            decay[clean_name(name) not in no_decay].append(p)
        weight_decay = self.hparams.get("weight_decay", 0.0)
        return [{"params": ps, "weight_decay": weight_decay if d else 0.0} for d, ps in decay.items() if ps]

    def optimizer_groups(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Muon's groups (none without --optimizer muon) and AdamW's: `param_groups`, split by kind of weight."""
        if self.muon_lr is None:
            return [], self.param_groups()
        names = {id(p): clean_name(n) for n, p in self.named_parameters()}
        taken = muon_names(self.net, self.recorded_no_decay())
        return split_for_muon(self.param_groups(), names, taken, self.muon_lr)

    def lr_multipliers(self, total: int, groups: list[dict[str, Any]]) -> list[Callable[[int], float]]:
        """One schedule per group; a task with a recipe of its own (fine-tuning's frozen backbone) overrides it."""
        warmup = int(self.hparams.get("warmup_fraction", 0.0) * total)
        return [warmup_cosine(total, warmup)] * len(groups)

    def configure_optimizers(self) -> Any:
        # Fused AdamW: one kernel for the whole update instead of several per tensor. Lightning cannot clip gradients
        # of a fused optimizer under a GradScaler (16-mixed), so that one combination stays unfused (bf16-mixed is
        # clipped here: configure_gradient_clipping).
        # FSDP1 on one device falls back to NO_SHARD, where fused AdamW fails on its step counts (pytorch#140514).
        scaled_clip = self.trainer.precision == "16-mixed" and bool(self.trainer.gradient_clip_val)
        fsdp1_alone = isinstance(self.trainer.strategy, FSDPStrategy) and self.trainer.world_size == 1
        fused = self.device.type == "cuda" and not scaled_clip and not fsdp1_alone
        beta1, beta2 = self.hparams.get("betas", TORCH_BETAS)
        adamw = dict(lr=self.hparams["lr"], betas=(beta1, beta2), fused=fused)
        muon, groups = self.optimizer_groups()
        optimizer = MuonWithAdamW(muon, groups, **adamw) if muon else torch.optim.AdamW(groups, **adamw)
        groups = optimizer.param_groups
        total = max(1, int(self.trainer.estimated_stepping_batches))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self.lr_multipliers(total, groups))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def configure_gradient_clipping(
        self, optimizer: Optimizer, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        # Lightning refuses to clip for a fused AdamW under any mixed precision, since the optimizer would unscale
        # 16-mixed's gradients only after the clip; bf16-mixed scales nothing, so its gradients are clipped as they are
        plugin = self.trainer.precision_plugin
        by_norm = gradient_clip_algorithm in (None, "norm")
        if gradient_clip_val and by_norm and isinstance(plugin, MixedPrecision) and plugin.scaler is None:
            torch.nn.utils.clip_grad_norm_(plugin.main_params(optimizer), gradient_clip_val)
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_train_start(self) -> None:
        self.loss_scale = self._current_loss_scale()  # after a resume has restored the scaler's state

    def on_fit_start(self) -> None:
        self._metrics_in_fp32()

    def on_test_start(self) -> None:
        self._metrics_in_fp32()

    def _metrics_in_fp32(self) -> None:
        """--precision bf16-true (and 16-true) turns every floating tensor of the module to half precision as fit and
        test begin, the torchmetrics states too: an epoch's mean summed in bf16 stops growing (the language model's
        test/loss read 8.0000, above ln 257). Put back to fp32 after that conversion; counts stay integers."""
        for metric in self.modules():
            if isinstance(metric, Metric):
                metric._apply(lambda t: t.float() if t.is_floating_point() else t)

    def lr_scheduler_step(self, scheduler: LRSchedulerTypeUnion, metric: Any) -> None:
        # 16-mixed: on overflowing gradients GradScaler skips optimizer.step and halves its scale, but Lightning still
        # steps the schedule, which would then run ahead of the weights; a drop in scale is how a skip shows.
        # Reading the scale waits for the GPU once per step, and only under 16-mixed.
        before, self.loss_scale = self.loss_scale, self._current_loss_scale()
        if before is None or self.loss_scale is None or self.loss_scale >= before:
            super().lr_scheduler_step(scheduler, metric)

    def _current_loss_scale(self) -> float | None:
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        return scaler.get_scale() if scaler is not None and scaler.is_enabled() else None


def engine_built_optimizer(module: nn.Module) -> bool:
    """Whether the engine built the module's optimizer (EngineModule's configure_optimizers), not the team: only then
    may a resume rewrite its saved state, or --optimizer choose it."""
    return isinstance(module, EngineModule) and type(module).configure_optimizers is EngineModule.configure_optimizers
