"""Trainer assembly: strategy, callbacks and logger, from the config, the resolved hardware and the task's monitor."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, Checkpoint, EMAWeightAveraging, LearningRateMonitor
from lightning.pytorch.strategies import Strategy
from torch import nn

from lightning_gpu_engine.checkpoint.after_hooks import SaveAfterHooks
from lightning_gpu_engine.checkpoint.callbacks import PeriodicCheckpoint, RunCheckpoint
from lightning_gpu_engine.checkpoint.saving import AtomicCheckpointIO, EveryRankWrites, last_path
from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import parse_every
from lightning_gpu_engine.data.eval_split import ExactDDP, ExactFSDP
from lightning_gpu_engine.perf.hardware import Hardware
from lightning_gpu_engine.perf.monitors import (
    LogStepProgressBar,
    LogStepThroughputMonitor,
    PlainProgress,
    ValidationRecord,
)
from lightning_gpu_engine.perf.networks import CompileNetworks
from lightning_gpu_engine.perf.promises import RunPromises
from lightning_gpu_engine.reliability.guards import FiniteLossGuard
from lightning_gpu_engine.reliability.loader_metrics import SeparateLoaderMetrics
from lightning_gpu_engine.reliability.metric_state import MetricStateResume
from lightning_gpu_engine.reliability.resume import ExactResume
from lightning_gpu_engine.reliability.stop_on_signal import StopOnSignal
from lightning_gpu_engine.task import Task, first_dim
from lightning_gpu_engine.trainer.launchers import build_cluster_environments
from lightning_gpu_engine.trainer.loggers import build_logger
from lightning_gpu_engine.trainer.sharding import FullyShard
from lightning_gpu_engine.trainer.steps import count_batches
from lightning_gpu_engine.trainer.validation import validate_every


def block_types(net: nn.Module) -> set[type[nn.Module]]:
    """The classes of the network's repeated blocks (ResNet's BasicBlock or Bottleneck, ViT's EncoderBlock, ...).

    FSDP shards, and activation checkpointing recomputes, one such block at a time. A block is the outermost module
    with sub-modules of its own inside a Sequential/ModuleList/ModuleDict stage; none found means one unit for all.
    """
    stages = (nn.Sequential, nn.ModuleList, nn.ModuleDict)

    def blocks(module: nn.Module) -> Iterator[type[nn.Module]]:
        for child in module.children():
            if isinstance(module, stages) and not isinstance(child, stages) and next(child.children(), None):
                yield type(child)  # its insides are sharded with it, so no need to look further down
            else:
                yield from blocks(child)

    return set(blocks(net))


def fsdp_units(task: Task | None, model: nn.Module) -> set[type[nn.Module]]:
    """The classes FSDP shards one by one in a task's module: the task's `wrap_policy`, else `block_types`."""
    return ((task.wrap_policy if task else None) or block_types)(getattr(model, "net", model))


def build_strategy(
    cfg: Config, hw: Hardware, wrap: set[type[nn.Module]] | None = None, fsdp2: bool = False, task: Task | None = None
) -> Strategy | str:
    """`task`: its DDP declarations (Task.find_unused_parameters, Task.lightning_strategy)."""
    if cfg.strategy == "fsdp" and fsdp2:
        sharded = cfg.checkpoint_format == "sharded"
        return FullyShard(wrap or set(), cfg.activation_checkpointing, cfg.fsdp_sharding, hw.world_size, sharded)
    if cfg.strategy == "fsdp":
        # Lightning derives FSDP's mixed-precision policy from --precision; `wrap` are the blocks sharded one by one.
        return ExactFSDP(
            auto_wrap_policy=wrap,
            sharding_strategy=cfg.fsdp_sharding,  # type: ignore[arg-type]  # one of FSDP_SHARDING (config.py)
            activation_checkpointing_policy=wrap if cfg.activation_checkpointing else None,
        )
    if (cfg.strategy == "ddp" or hw.world_size > 1) and task is not None and task.lightning_strategy:
        return task.lightning_strategy
    if cfg.strategy == "ddp" or hw.world_size > 1:
        # Unless the task says a step leaves some parameters without a gradient (a GAN's toggle_optimizer), every
        # parameter gets one each step, so the unused-parameter search would be pure overhead;
        # gradient_as_bucket_view saves one gradient-sized copy.
        unused = task is not None and task.find_unused_parameters
        return RunDDP(find_unused_parameters=unused, gradient_as_bucket_view=True)
    return "auto"


class RunDDP(EveryRankWrites, ExactDDP):
    pass


def build_callbacks(cfg: Config, task: Task | None = None, compiles: bool = False) -> list[Callback]:
    """`task`: its monitor picks the best checkpoint and its counts feed the throughput; unset = val/loss, min.
    `compiles`: the run compiles (Hardware.compile): the networks of any module."""
    checkpoints = last_path(cfg.output_dir).parent
    monitor, mode = (task.monitor, task.mode) if task else ("val/loss", "min")
    short = monitor.rsplit("/", 1)[-1]
    every_steps, every_seconds = parse_every(cfg.checkpoint_every)
    # A terminal gets Rich's live bar; a SLURM .out file or a CI log gets plain lines it can show as they come.
    progress = LogStepProgressBar if sys.stdout.isatty() else PlainProgress
    return [
        RunCheckpoint(  # first, so trainer.checkpoint_callback.best_model_path is the best one
            dirpath=checkpoints,
            filename="best-epoch{epoch:03d}-" + short + "{" + monitor + ":.4f}",  # e.g. best-epoch007-acc0.9350
            auto_insert_metric_name=False,
            monitor=monitor,
            mode=mode,
        ),
        # last.ckpt after every epoch, improved or not: what --resume last continues from. With --val-every too, where
        # Lightning would save it after each validation instead, missing the steps after the last one (and a save per
        # validation is --checkpoint-every's to decide)
        RunCheckpoint(
            dirpath=checkpoints,
            filename="last",
            enable_version_counter=False,
            save_on_train_epoch_end=True if cfg.val_every else None,
        ),
        # and mid-epoch every --checkpoint-every, the most a hard kill (OOM killer, node loss) can lose
        PeriodicCheckpoint(last_path(cfg.output_dir), every_steps, every_seconds, cfg.log_every_n_steps, cfg.val_every),
        StopOnSignal(last_path(cfg.output_dir)),  # and after a Ctrl-C, SIGTERM, SIGHUP or SIGUSR1, mid-epoch
        SaveAfterHooks(),  # each save after the module's own hooks of its moment too (an average it keeps itself)
        ExactResume(),  # so that resuming from it gives the very weights an uninterrupted run would have
        MetricStateResume(),  # and the epoch metrics it would report (the counts so far, on every rank)
        SeparateLoaderMetrics(),  # and each validation loader's own values of a metric logged from several
        FiniteLossGuard(every_n_steps=cfg.log_every_n_steps),  # and never with the weights a nan loss left
        LearningRateMonitor(logging_interval="step"),
        # Lightning's ThroughputMonitor and RichProgressBar, but reading the GPU only on logging steps (monitors.py)
        LogStepThroughputMonitor(
            batch_size_fn=task.batch_size_fn if task else first_dim,
            length_fn=task.length_fn if task else None,
            every_n_steps=cfg.log_every_n_steps,
        ),
        progress(cfg.log_every_n_steps),
        ValidationRecord(Path(cfg.output_dir) / "validation.jsonl", monitor, cfg.val_every),
        RunPromises(),  # a warning line when the task breaks a speed promise at run time (promises.py)
        *([CompileNetworks(cfg.compile_mode)] if compiles else []),
        # --ema: validation, the best checkpoint and the final weights use the average (Lightning swaps it in)
        *([EMAWeightAveraging(decay=cfg.ema_decay)] if cfg.ema else []),
    ]


class _NoAdverts(logging.Filter):
    """Drops Lightning's "💡 Tip: try installing litlogger/litmodels" lines: noise in every run's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("💡 Tip")


def build_trainer(
    cfg: Config,
    hw: Hardware,
    wrap: set[type[nn.Module]] | None = None,
    logger_version: Any = None,
    task: Task | None = None,
    resumed_step: int | None = None,
    **overrides: Any,
) -> L.Trainer:
    kwargs: dict[str, Any] = dict(
        accelerator=hw.accelerator,
        devices=hw.devices,
        num_nodes=cfg.num_nodes,
        strategy=build_strategy(cfg, hw, wrap, fsdp2=task.fsdp2 if task else False, task=task),
        # saves that never leave a truncated file (or a half-written folder)
        plugins=[
            AtomicCheckpointIO(cfg.checkpoint_format == "sharded", cfg.async_save, cfg.keep_last),
            *build_cluster_environments(),
        ],
        precision=hw.precision,
        sync_batchnorm=cfg.sync_batchnorm,
        max_epochs=cfg.max_epochs,
        max_steps=cfg.max_steps,
        accumulate_grad_batches=cfg.accumulate_grad_batches,
        # --val-every: in batches for Lightning's bookkeeping (validation.py decides by optimizer steps), across epochs
        val_check_interval=cfg.val_every * cfg.accumulate_grad_batches if cfg.val_every else 1.0,
        check_val_every_n_epoch=None if cfg.val_every else 1,
        limit_val_batches=cfg.val_batches or 1.0,
        gradient_clip_val=cfg.gradient_clip_val or None,
        deterministic=cfg.deterministic,
        benchmark=hw.cudnn_benchmark,
        logger=build_logger(cfg, logger_version, resumed_step, *([task.tracker_project] if task else [])),
        callbacks=build_callbacks(cfg, task, hw.compile),
        log_every_n_steps=cfg.log_every_n_steps,
        fast_dev_run=cfg.fast_dev_run,
        default_root_dir=cfg.output_dir,
        # Validation inside fit runs under no_grad; testing under inference_mode would feed the compiled network
        # inference tensors, for which dynamo compiles every evaluation graph again. Compiled, test as validation does.
        inference_mode=not hw.compile,
    )
    kwargs.update(overrides)
    tips = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _NoAdverts) for f in tips.filters):
        tips.addFilter(_NoAdverts())
    trainer = L.Trainer(**kwargs)
    count_batches(trainer)  # a step is a batch that stepped the optimizers, under manual optimization too
    if cfg.val_every and not cfg.fast_dev_run:  # --fast-dev-run validates its one step
        validate_every(trainer, cfg.val_every)
    return trainer


def measuring_trainer(
    cfg: Config,
    hw: Hardware,
    wrap: set[type[nn.Module]] | None,
    extra: list[Callback],
    task: Task | None = None,
    **overrides: Any,
) -> L.Trainer:
    """The usual Trainer and callbacks, minus checkpoints and validation: what --profile and bench.py time."""
    callbacks = [c for c in build_callbacks(cfg, task, hw.compile) if not isinstance(c, Checkpoint)]
    return build_trainer(
        cfg,
        hw,
        wrap,
        task=task,
        callbacks=[*callbacks, *extra],
        enable_checkpointing=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        **overrides,
    )
