"""Train, then test the best checkpoint: `python train.py --help` lists every option with its default and reason."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from {{ cookiecutter.package_name }}.cli import fail, parse_args, save_yaml
from {{ cookiecutter.package_name }}.config import Config, ConfigError


def resume_path(cfg: Config) -> str | None:
    if cfg.resume is None:
        return None
    path = Path(cfg.output_dir) / "checkpoints" / "last.ckpt" if cfg.resume == "last" else Path(cfg.resume)
    if not path.is_file():
        raise ConfigError("resume", f"no checkpoint at {path}; give 'last' or the path of a .ckpt file")
    return str(path)


def main(argv: list[str] | None = None) -> dict[str, float]:
    cfg = parse_args(argv)  # before the heavy imports, so a bad flag answers at once
    import lightning as L

    from {{ cookiecutter.package_name }} import hardware
    from {{ cookiecutter.package_name }}.data import ImageDataModule
    from {{ cookiecutter.package_name }}.model import ImageClassifier
    from {{ cookiecutter.package_name }}.trainer import build_trainer

    try:
        hw = hardware.resolve(cfg)
        ckpt = resume_path(cfg)
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
        )
        model = ImageClassifier(
            model=cfg.model,
            num_classes=datamodule.num_classes,
            image_size=cfg.image_size,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            warmup_fraction=cfg.warmup_fraction,
            channels_last=hw.channels_last,
            compile=hw.compile,
            compile_mode=cfg.compile_mode,
        )
    except ConfigError as err:
        fail(str(err))

    hardware.apply_backend_flags(cfg)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    trainer = build_trainer(cfg, hw)
    if trainer.is_global_zero:
        print(hw.summary())
        save_yaml(cfg, Path(cfg.output_dir) / "config.yaml")
        global_batch = cfg.batch_size * hw.world_size * cfg.accumulate_grad_batches
        for logger in trainer.loggers:
            logger.log_hyperparams({**asdict(cfg), "global_batch_size": global_batch, "resolved": hw.summary()})

    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt)
    checkpoint = trainer.checkpoint_callback
    best = None if cfg.fast_dev_run or checkpoint is None else (checkpoint.best_model_path or None)  # type: ignore[attr-defined]
    fit_metrics = {k: float(v) for k, v in trainer.logged_metrics.items()}
    trainer.test(model, datamodule=datamodule, ckpt_path=best)
    metrics = {**fit_metrics, **{k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}}
    if best is not None:
        metrics["val/acc"] = float(checkpoint.best_model_score)  # type: ignore[union-attr]
    if trainer.is_global_zero:
        nan = float("nan")
        throughput = metrics.get("train/device/samples_per_sec", nan) * hw.world_size
        print(
            f"best val/acc={metrics.get('val/acc', nan):.4f}  test/acc={metrics.get('test/acc', nan):.4f}  "
            f"train throughput={throughput:.0f} img/s  checkpoints: {Path(cfg.output_dir, 'checkpoints').resolve()}"
        )
    return metrics


if __name__ == "__main__":
    main()
