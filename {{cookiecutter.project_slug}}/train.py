"""Train, then test the best checkpoint: `python train.py --help` lists every option with its default and reason."""

from __future__ import annotations

import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from {{ cookiecutter.package_name }}.engine.cli import fail, parse_args, save_yaml
from {{ cookiecutter.package_name }}.engine.config import Config, ConfigError
from {{ cookiecutter.package_name }}.engine.rundir import check_output_dir, hold_output_dir


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
    try:
        check_output_dir(cfg)
    except ConfigError as err:
        fail(str(err))
    import lightning as L

    from {{ cookiecutter.package_name }}.engine import hardware
    from {{ cookiecutter.package_name }}.engine.guards import check_checkpoint, check_enough_data, check_same_network
    from {{ cookiecutter.package_name }}.engine.resume_changes import RunRecord, check_changes, keep_batch_size
    from {{ cookiecutter.package_name }}.engine.trainer import build_trainer, check_launcher, launched_as_global_zero
    from {{ cookiecutter.package_name }}.tasks.image_classification.data import ImageDataModule
    from {{ cookiecutter.package_name }}.tasks.image_classification.module import ImageClassifier, block_types

    L.seed_everything(cfg.seed, workers=True, verbose=False)  # before the model, so its initial weights follow --seed
    try:
        hw = hardware.resolve(cfg)
        check_launcher(cfg)
        ckpt = resume_path(cfg)
        # Read before the data and the model are built: an option the checkpoint refuses must download nothing
        saved: dict[str, Any] = check_checkpoint(Path(ckpt)) if ckpt is not None else {}
        notes = keep_batch_size(cfg, saved) if ckpt is not None else []
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
        if ckpt is not None:
            images = len(datamodule.samples["train"][0]) if cfg.data == "folder" else None
            notes += check_changes(saved, cfg, hw.world_size, datamodule.classes, images)
        model = ImageClassifier.from_config(cfg, hw, datamodule.classes)
        datamodule.crop_pct = float(model.hparams.get("crop_pct", datamodule.crop_pct))  # eval crop = the model's
        if ckpt is not None:
            check_same_network(Path(ckpt), saved, model, "resume")
        if cfg.data != "cifar10":  # cifar10 (45,000 images) may not be downloaded yet
            check_enough_data(datamodule, cfg.batch_size, hw.world_size)
    except ConfigError as err:
        fail(str(err))
    rank_zero = launched_as_global_zero()  # node 0's first process only: every node has a first process
    with hold_output_dir(cfg, rank_zero):  # one run at a time in an --output-dir
        if rank_zero:
            print(hw.summary(), flush=True)  # the run's first line, before Lightning's own
            for note in notes:  # the options changed on resume, and what is done with each
                print(f"resume: {note}", flush=True)
        hardware.apply_backend_flags(cfg)
        if cfg.profile:
            from {{ cookiecutter.package_name }}.engine.profiling import profile

            return profile(cfg, hw, model, datamodule, wrap=block_types(model.net))
        logger_version = (saved.get("exact_resume") or {}).get("logger_version")  # a resumed run logs on in its run
        trainer = build_trainer(cfg, hw, wrap=block_types(model.net), logger_version=logger_version)
        trainer.callbacks.append(RunRecord(cfg, hw.world_size))  # type: ignore[attr-defined]  # for a later --resume
        return _fit_and_test(cfg, hw, trainer, model, datamodule, ckpt)


def _fit_and_test(cfg: Config, hw: Any, trainer: Any, model: Any, datamodule: Any, ckpt: str | None) -> dict:
    from {{ cookiecutter.package_name }}.engine.guards import explain_failures, scale_batch_size
    from {{ cookiecutter.package_name }}.engine.monitors import LogStepThroughputMonitor

    if cfg.auto_batch_size:
        with explain_failures(cfg, trainer, datamodule):
            cfg.batch_size = scale_batch_size(trainer, model, datamodule)
    if trainer.is_global_zero:
        save_yaml(cfg, Path(cfg.output_dir) / "config.yaml")
        global_batch = cfg.batch_size * hw.world_size * cfg.accumulate_grad_batches
        for logger in trainer.loggers:
            logger.log_hyperparams({**asdict(cfg), "global_batch_size": global_batch, "resolved": hw.summary()})

    with explain_failures(cfg, trainer, datamodule):  # nan loss, out of memory, Ctrl-C: one line, no traceback
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)
    checkpoint = trainer.checkpoint_callback
    best = None if cfg.fast_dev_run or checkpoint is None else (checkpoint.best_model_path or None)  # type: ignore[attr-defined]
    fit_metrics = {k: float(v) for k, v in trainer.logged_metrics.items()}
    # A path, never None where there is one: under SLURM Lightning would test the newest hpc_ckpt_N.ckpt, however old
    last = Path(cfg.output_dir, "checkpoints", "last.ckpt")
    tested = best or (str(last) if last.is_file() and not cfg.fast_dev_run else None)
    with explain_failures(cfg, trainer, datamodule):  # a stop during the test too: its own line and exit code
        trainer.test(model, datamodule=datamodule, ckpt_path=tested, weights_only=True)
    metrics = {**fit_metrics, **{k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}}
    if best is not None:
        metrics["val/acc"] = float(checkpoint.best_model_score)  # type: ignore[union-attr]
    if trainer.is_global_zero:
        nan = float("nan")
        meter = next((c for c in trainer.callbacks if isinstance(c, LogStepThroughputMonitor)), None)
        # the logged rate of the last logging steps; without two logging steps, the average over the whole run
        per_device = metrics.get("train/device/samples_per_sec") or (meter.average_rate() if meter else None)
        throughput = f"{per_device * hw.world_size:.0f} img/s" if per_device else "n/a (no training step)"
        print(
            f"{'best' if best else 'last'} val/acc={metrics.get('val/acc', nan):.4f}  "
            f"test/acc={metrics.get('test/acc', nan):.4f}  train throughput={throughput}  "
            f"checkpoints: {Path(cfg.output_dir, 'checkpoints').resolve()}"
        )
    return metrics


if __name__ == "__main__":
    from {{ cookiecutter.package_name }}.engine.quiet import set_up_warnings

    set_up_warnings()
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C outside the training loop (start-up, the final test): nothing more to save
        print("stopped by SIGINT", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
    finally:  # a further signal while Python shuts down (loader workers, logger threads) keeps the exit code
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, signal.SIG_IGN)
