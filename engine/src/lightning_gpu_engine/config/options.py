"""The engine's options of a run, each with its default and why: with the task's own options dataclass, the single
source of the CLI, the YAML files and the saved hparams.

This module imports neither torch nor lightning, so `train.py --help` and bad flags answer at once.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from dataclasses import dataclass
from typing import Any

from lightning_gpu_engine.config.values import (
    ConfigError,
    check_path,
    opt,
    parse_betas,
    parse_devices,
    parse_every,
    usable_cpus,
)

PRECISIONS = ("auto", "bf16-mixed", "bf16-true", "16-mixed", "32-true")
STRATEGIES = ("auto", "ddp", "fsdp")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
FSDP_SHARDING = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
OPTIMIZERS = ("adamw", "muon")
MUON_LR = 0.02  # --muon-lr's default: another value asks for Muon
CHECKPOINT_FORMATS = ("file", "sharded")
LOGGERS = ("tensorboard", "csv", "wandb", "mlflow")
TRACKERS = ("wandb", "mlflow")  # loggers whose package (of the same name) is optional


@dataclass
class Config:
    # --- hardware and scale-out -------------------------------------------------------------
    accelerator: str = opt("auto", "auto picks CUDA when a GPU is visible, else CPU", ACCELERATORS)
    devices: str = opt("auto", "per node: 'auto', a count, or GPU ids like '0,1'")
    num_nodes: int = opt(1, "machines in the job; global batch = batch-size x devices x nodes")
    strategy: str = opt("auto", "auto = DDP when more than one device", STRATEGIES)
    precision: str = opt(
        "auto",
        "auto = bf16-mixed on Ampere+ GPUs and on CPUs with AMX/AVX512-BF16 (bench.py: 1.1-2.0x fp32 for ResNets), "
        "16-mixed on older GPUs, 32-true on other CPUs; bf16-true: bf16 weights too",
        PRECISIONS,
    )
    compile: bool | None = opt(
        None,
        "torch.compile the network; unset = on with CUDA, off on CPU where compile time dominates",
    )
    compile_mode: str = opt("default", "max-autotune trades minutes of compile for a few % speed", COMPILE_MODES)
    compile_cache: str = opt(
        "auto",
        "where compiled graphs are kept for restarts and requeues: auto = <output-dir>/compile-cache, a folder to "
        "share one between runs, none = torch's own (/tmp, node-local)",
    )
    channels_last: bool | None = opt(
        None,
        "tasks that declare it (convolutional networks): NHWC lets tensor cores run convolutions without transposes; "
        "unset = on with CUDA, and on CPUs running bf16 natively (bench.py: 1.04-1.24x there, 0.83-0.96x in fp32)",
    )
    tf32: bool = opt(True, "TF32 matmuls/convs on Ampere+: ~8x fp32 speed at ~1e-3 relative error")
    sync_batchnorm: bool = opt(False, "share BatchNorm statistics across GPUs: for small per-device batches")
    fsdp_sharding: str = opt("FULL_SHARD", "FSDP: what to shard (params+grads+optimizer = FULL_SHARD)", FSDP_SHARDING)
    activation_checkpointing: bool = opt(False, "FSDP: recompute block activations in backward to save memory")
    # --- data loading ------------------------------------------------------------------------
    batch_size: int = opt(128, "per device; the global batch is this x devices x nodes x accumulation")
    auto_batch_size: bool = opt(False, "first find the largest --batch-size that fits in memory; one device only")
    num_workers: int | None = opt(None, "loader processes per device; unset = CPUs per device - 1 (SLURM-aware)")
    # --- optimisation ------------------------------------------------------------------------
    ema: bool = opt(False, "validate and checkpoint an exponential moving average of the weights")
    ema_decay: float = opt(0.999, "--ema: the old average's weight per step; it spans about 1/(1-decay) steps")
    lr: float = opt(2e-3, "AdamW peak learning rate, reached after the warm-up")
    weight_decay: float = opt(0.05, "AdamW decoupled weight decay (not applied to norms and biases)")
    betas: str = opt("0.9,0.999", "AdamW's beta1,beta2: how slowly its averages of the gradient and its square move")
    optimizer: str = opt(
        "adamw", "muon: Muon (torch 2.9+) for the 2-D hidden weights at --muon-lr, AdamW for the rest", OPTIMIZERS
    )
    muon_lr: float = opt(MUON_LR, "--optimizer muon: Muon's peak rate, scaled up for matrices taller than wide")
    warmup_fraction: float = opt(0.05, "share of all steps spent warming up linearly before the cosine decay")
    max_epochs: int = opt(10, "epochs to train")
    max_steps: int = opt(-1, "stop after this many steps (batches that stepped the optimizers); -1 = no limit")
    accumulate_grad_batches: int = opt(1, "batches per optimizer step: a larger batch without more memory")
    gradient_clip_val: float = opt(0.0, "clip the gradient norm to this; 0 = off")
    seed: int = opt(42, "seeds Python, NumPy, torch and the loader workers")
    deterministic: bool = opt(False, "bitwise-reproducible kernels; slower, and turns cudnn.benchmark off")
    # --- run -------------------------------------------------------------------------------
    output_dir: str = opt(
        "outputs",
        "checkpoints, logs and the resolved config.yaml go here: a folder, or object storage (s3://bucket/prefix) "
        "for runs without a shared disk, staged on this node and uploaded at each save",
    )
    resume: str | None = opt(
        None,
        "'last' = <output-dir>/checkpoints/last.ckpt; 'auto' = the newest of it and a preemption checkpoint, "
        "or a fresh start if neither exists (what a requeued job needs); or a checkpoint's path (or URL, where "
        "--output-dir is one)",
    )
    logger: str = opt("tensorboard", "experiment tracker; wandb and mlflow need their package", LOGGERS)
    log_every_n_steps: int = opt(50, "logging reads metrics back from the GPU: not every step")
    checkpoint_every: str = opt(
        "30min",
        "also save last.ckpt mid-epoch this often: '30min', '2h', '500steps', both ('30min,500steps') or 'off'; "
        "bounds what a hard kill (OOM killer, node loss) loses",
    )
    checkpoint_format: str = opt(
        "file",
        "file: one .ckpt, gathered on rank 0 (loads anywhere); sharded: a folder each rank writes its part of "
        "(torch.distributed.checkpoint), no gathering",
        CHECKPOINT_FORMATS,
    )
    keep_last: int = opt(
        0,
        "also keep the K newest saves of last.ckpt as checkpoints/step-<N>.ckpt, to go back to (hard links on a "
        "disk, copies within object storage); 0 = last.ckpt alone",
    )
    store_timeout: float = opt(
        20.0,
        "object-storage --output-dir: seconds a request may move nothing before it fails in one line; 20 s lets a "
        "stop's upload end within the 30 s that Kubernetes and SLURM give after SIGTERM",
    )
    async_save: bool = opt(False, "sharded: training waits only for a copy to host memory; the write goes on behind")
    val_every: int | None = opt(
        None, "validate every this many steps (batches that stepped the optimizers), across epochs; unset = epoch end"
    )
    val_batches: int | None = opt(None, "batches per validation (the same first ones each time); unset = all")
    fast_dev_run: bool = opt(False, "one batch of train, val and test to check the wiring")
    profile: bool = opt(False, "profile 5 steps after warm-up and stop; trace and kernel table in <output-dir>/profile")

    def __post_init__(self) -> None:
        check_choices(self)
        parse_devices(self.devices)
        for name in ("output_dir", "resume", "compile_cache"):
            check_path(name, getattr(self, name))
        positive = ("num_nodes", "batch_size", "max_epochs", "accumulate_grad_batches")
        for name in (*positive, "log_every_n_steps", "val_every", "val_batches"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(name, f"must be a positive integer, got {getattr(self, name)}")
        if not 0 <= self.seed < 2**32:
            raise ConfigError("seed", f"must be from 0 to {2**32 - 1} (what NumPy can seed), got {self.seed}")
        cpus = usable_cpus()
        if self.num_workers is not None and not 0 <= self.num_workers <= cpus:
            # each worker is a process holding a copy of the dataset: more than the CPUs only costs memory
            raise ConfigError(
                "num_workers", f"must be from 0 to the {cpus} CPUs this process may use, got {self.num_workers}"
            )
        for name in ("lr", "muon_lr", "weight_decay", "gradient_clip_val", "warmup_fraction"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(name, f"must be a finite number, got {getattr(self, name)}")
        parse_every(self.checkpoint_every)
        self.betas = ",".join(map(str, parse_betas(self.betas)))  # one spelling, so a resume compares values
        if self.max_steps < -1 or self.max_steps == 0:
            raise ConfigError("max_steps", f"must be positive or -1 (no limit), got {self.max_steps}")
        for name in ("lr", "muon_lr"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, f"must be positive, got {getattr(self, name)}")
        if self.optimizer != "muon" and self.muon_lr != MUON_LR:  # as the FSDP-only options are, not ignored
            muon = f"only applies with --optimizer muon, not {self.optimizer}; add that or leave it out"
            raise ConfigError("muon_lr", muon)
        if self.optimizer == "muon" and self.strategy == "fsdp":
            raise ConfigError(
                "optimizer",
                "muon orthogonalizes whole matrices, which FSDP splits across devices; use --strategy ddp or adamw",
            )
        if not 0 <= self.warmup_fraction < 1:
            raise ConfigError("warmup_fraction", f"must be in [0, 1), got {self.warmup_fraction}")
        if self.resume is not None and self.resume not in ("auto", "last") and not self.resume.endswith(".ckpt"):
            raise ConfigError("resume", f"give 'auto', 'last' or the path of a .ckpt file; got {self.resume!r}")
        if self.keep_last < 0:
            raise ConfigError("keep_last", f"must be 0 (last.ckpt alone) or a positive count, got {self.keep_last}")
        if not (math.isfinite(self.store_timeout) and self.store_timeout > 0):
            raise ConfigError("store_timeout", f"must be a positive number of seconds, got {self.store_timeout}")
        if self.strategy != "fsdp" and (self.activation_checkpointing or self.fsdp_sharding != "FULL_SHARD"):
            bad = "activation_checkpointing" if self.activation_checkpointing else "fsdp_sharding"
            raise ConfigError(bad, f"only applies with --strategy fsdp, not {self.strategy}")
        if self.profile and self.fast_dev_run:
            raise ConfigError("profile", "needs a dozen training steps; --fast-dev-run runs one, leave it out")
        if self.weight_decay < 0 or self.gradient_clip_val < 0:
            bad = "weight_decay" if self.weight_decay < 0 else "gradient_clip_val"
            raise ConfigError(bad, f"must be 0 or more, got {getattr(self, bad)}")
        if self.ema and not 0 < self.ema_decay < 1:
            raise ConfigError("ema_decay", f"must be between 0 and 1 (0.999 is usual), got {self.ema_decay}")
        if self.async_save and self.checkpoint_format != "sharded":
            raise ConfigError("async_save", "writes sharded checkpoints only: add --checkpoint-format sharded")
        if self.ema and self.strategy == "fsdp":
            raise ConfigError("ema", "keeps a whole copy of the model on every device, which FSDP exists to avoid")


def check_logger(cfg: Config) -> None:
    """The chosen tracker's package is there, before anything is written: the trackers are optional dependencies."""
    if cfg.logger in TRACKERS and importlib.util.find_spec(cfg.logger) is None:
        raise ConfigError(
            "logger", f"{cfg.logger} is not installed: pip install {cfg.logger}, or use tensorboard or csv"
        )


def check_choices(options: Any) -> None:
    """Every field of an options dataclass whose `opt` lists choices holds one of them."""
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if f.metadata["choices"] and value not in f.metadata["choices"]:
            raise ConfigError(f.name, f"{value!r} is not one of: {', '.join(f.metadata['choices'])}")
