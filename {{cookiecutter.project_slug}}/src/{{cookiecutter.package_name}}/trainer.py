"""Trainer assembly: strategy, callbacks and logger, from the config and the resolved hardware. Task-agnostic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import (
    Callback,
    LearningRateMonitor,
    ModelCheckpoint,
    RichProgressBar,
    ThroughputMonitor,
)
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, Strategy
from torch import nn

from .config import Config
from .hardware import Hardware


def build_strategy(cfg: Config, hw: Hardware, wrap: set[type[nn.Module]] | None = None) -> Strategy | str:
    if cfg.strategy == "fsdp":
        # Lightning derives FSDP's mixed-precision policy from --precision; `wrap` are the blocks sharded one by one.
        return FSDPStrategy(
            auto_wrap_policy=wrap,
            sharding_strategy=cfg.fsdp_sharding,
            activation_checkpointing_policy=wrap if cfg.activation_checkpointing else None,
        )
    if cfg.strategy == "ddp" or hw.world_size > 1:
        # Every parameter gets a gradient each step, so the unused-parameter search would be pure overhead;
        # gradient_as_bucket_view saves one gradient-sized copy.
        return DDPStrategy(find_unused_parameters=False, gradient_as_bucket_view=True)
    return "auto"


def build_logger(cfg: Config) -> Logger:
    save_dir = str(Path(cfg.output_dir) / "logs")
    if cfg.logger == "csv":
        return CSVLogger(save_dir, name="")
{%- if cookiecutter.logger == "wandb" %}
    if cfg.logger == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        return WandbLogger(save_dir=save_dir, project="{{ cookiecutter.project_slug }}")
{%- elif cookiecutter.logger == "mlflow" %}
    if cfg.logger == "mlflow":
        from lightning.pytorch.loggers import MLFlowLogger

        return MLFlowLogger(experiment_name="{{ cookiecutter.project_slug }}", save_dir=str(Path(save_dir) / "mlruns"))
{%- endif %}
    return TensorBoardLogger(save_dir, name="")


def build_callbacks(cfg: Config) -> list[Callback]:
    checkpoints = Path(cfg.output_dir) / "checkpoints"
    return [
        ModelCheckpoint(  # first, so trainer.checkpoint_callback.best_model_path is the best one
            dirpath=checkpoints,
            filename="best-epoch{epoch:03d}-acc{val/acc:.4f}",
            auto_insert_metric_name=False,
            monitor="val/acc",
            mode="max",
        ),
        # last.ckpt after every epoch, improved or not: what --resume last continues from.
        ModelCheckpoint(dirpath=checkpoints, filename="last", enable_version_counter=False),
        LearningRateMonitor(logging_interval="step"),
        ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0)),
        RichProgressBar(),
    ]


def build_trainer(cfg: Config, hw: Hardware, wrap: set[type[nn.Module]] | None = None, **overrides: Any) -> L.Trainer:
    kwargs: dict[str, Any] = dict(
        accelerator=hw.accelerator,
        devices=hw.devices,
        num_nodes=cfg.num_nodes,
        strategy=build_strategy(cfg, hw, wrap),
        precision=hw.precision,
        sync_batchnorm=cfg.sync_batchnorm,
        max_epochs=cfg.max_epochs,
        max_steps=cfg.max_steps,
        accumulate_grad_batches=cfg.accumulate_grad_batches,
        gradient_clip_val=cfg.gradient_clip_val or None,
        deterministic=cfg.deterministic,
        benchmark=hw.cudnn_benchmark,
        logger=build_logger(cfg),
        callbacks=build_callbacks(cfg),
        log_every_n_steps=cfg.log_every_n_steps,
        fast_dev_run=cfg.fast_dev_run,
        default_root_dir=cfg.output_dir,
    )
    kwargs.update(overrides)
    return L.Trainer(**kwargs)
