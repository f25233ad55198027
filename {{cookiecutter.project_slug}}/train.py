"""Train, then test the best checkpoint: `python train.py --help` lists every option with its default and reason."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from {{ cookiecutter.package_name }}.cli import fail, parse_args, save_yaml
from {{ cookiecutter.package_name }}.config import Config, ConfigError


def resume_path(cfg: Config) -> str | None:
    if cfg.resume is None:
        return None
    output = Path(cfg.output_dir)
    if cfg.resume == "auto":  # hpc_ckpt_N.ckpt: what Lightning saves when SLURM warns of preemption with SIGUSR1
        found = [*output.glob("hpc_ckpt_*.ckpt"), *output.glob("checkpoints/last.ckpt")]
        return str(max(found, key=lambda p: p.stat().st_mtime)) if found else None
    path = output / "checkpoints" / "last.ckpt" if cfg.resume == "last" else Path(cfg.resume)
    if not path.is_file():
        raise ConfigError("resume", f"no checkpoint at {path}; 'auto' starts afresh when there is none")
    return str(path)


def main(argv: list[str] | None = None) -> dict[str, float]:
    cfg = parse_args(argv)  # before the heavy imports, so a bad flag answers at once
    import lightning as L

    from {{ cookiecutter.package_name }} import hardware
    from {{ cookiecutter.package_name }}.data import ImageDataModule
    from {{ cookiecutter.package_name }}.guards import check_checkpoint, explain_failures, scale_batch_size
    from {{ cookiecutter.package_name }}.model import ImageClassifier, block_types
    from {{ cookiecutter.package_name }}.trainer import build_trainer

    L.seed_everything(cfg.seed, workers=True, verbose=False)  # before the model, so its initial weights follow --seed
    try:
        hw = hardware.resolve(cfg)
        ckpt = resume_path(cfg)
        if ckpt is not None:
            check_checkpoint(Path(ckpt))
        datamodule = ImageDataModule(
            data=cfg.data,
            data_dir=cfg.data_dir,
            image_size=cfg.image_size,
            batch_size=cfg.batch_size,
            num_workers=hw.num_workers,
            pin_memory=hw.pin_memory,
            channels_last=hw.channels_last,
            train_samples=cfg.train_samples,
            seed=cfg.seed,
            decode=hw.decode,
        )
        model = ImageClassifier.from_config(cfg, hw, datamodule.classes)
        datamodule.crop_pct = float(model.hparams.get("crop_pct", datamodule.crop_pct))  # eval crop = the model's
    except ConfigError as err:
        fail(str(err))

    hardware.apply_backend_flags(cfg)
    if cfg.profile:
        from {{ cookiecutter.package_name }}.profiling import profile

        return profile(cfg, hw, model, datamodule, wrap=block_types(model.net))
    trainer = build_trainer(cfg, hw, wrap=block_types(model.net))
    if cfg.auto_batch_size:
        with explain_failures(cfg, trainer, datamodule):
            cfg.batch_size = scale_batch_size(trainer, model, datamodule)
    if trainer.is_global_zero:
        print(hw.summary())
        save_yaml(cfg, Path(cfg.output_dir) / "config.yaml")
        global_batch = cfg.batch_size * hw.world_size * cfg.accumulate_grad_batches
        for logger in trainer.loggers:
            logger.log_hyperparams({**asdict(cfg), "global_batch_size": global_batch, "resolved": hw.summary()})

    with explain_failures(cfg, trainer, datamodule):  # nan loss, out of memory, Ctrl-C: one line, no traceback
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)
    checkpoint = trainer.checkpoint_callback
    best = None if cfg.fast_dev_run or checkpoint is None else (checkpoint.best_model_path or None)  # type: ignore[attr-defined]
    fit_metrics = {k: float(v) for k, v in trainer.logged_metrics.items()}
    trainer.test(model, datamodule=datamodule, ckpt_path=best, weights_only=True)
    metrics = {**fit_metrics, **{k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}}
    if best is not None:
        metrics["val/acc"] = float(checkpoint.best_model_score)  # type: ignore[union-attr]
    if trainer.is_global_zero:
        nan = float("nan")
        per_device = metrics.get("train/device/samples_per_sec")  # absent when too few steps were logged
        throughput = f"{per_device * hw.world_size:.0f} img/s" if per_device else "n/a"
        print(
            f"{'best' if best else 'last'} val/acc={metrics.get('val/acc', nan):.4f}  "
            f"test/acc={metrics.get('test/acc', nan):.4f}  train throughput={throughput}  "
            f"checkpoints: {Path(cfg.output_dir, 'checkpoints').resolve()}"
        )
    return metrics


if __name__ == "__main__":
    main()
