"""`main(task)`: a task trained end to end. Parse, check the output dir, resolve the hardware, build, fit, test, and
print one summary line. The entry point's side of the line: every ConfigError raised below ends here, as one line."""

from __future__ import annotations

import signal
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from .cli import fail, parse_run, save_yaml
from .config import Config, ConfigError
from .rundir import check_output_dir, hold_output_dir
from .task import Task


def main(task: Task, argv: list[str] | None = None) -> dict[str, float]:
    cfg, opts = parse_run(argv, task.options, task.name)  # before the heavy imports, so a bad flag answers at once
    try:
        check_output_dir(cfg)
    except ConfigError as err:
        fail(str(err))
    import lightning as L

    from . import hardware
    from .checkpoints import resume_path
    from .guards import check_checkpoint, check_same_network
    from .resume_changes import RunRecord, check_changes, keep_batch_size
    from .trainer import block_types, build_trainer, check_launcher, launched_as_global_zero

    L.seed_everything(cfg.seed, workers=True, verbose=False)  # before the model, so its initial weights follow --seed
    try:
        hw = hardware.resolve(cfg)
        if task.resolve is not None:
            hw = replace(hw, choices={**hw.choices, **task.resolve(cfg, opts, hw)})
        check_launcher(cfg)
        ckpt = resume_path(cfg.output_dir, cfg.resume)
        # Read before the data and the model are built: an option the checkpoint refuses must download nothing
        saved: dict[str, Any] = check_checkpoint(Path(ckpt)) if ckpt is not None else {}
        notes = keep_batch_size(cfg, saved) if ckpt is not None else []
        datamodule = task.build_data(cfg, opts, hw)
        if ckpt is not None:
            notes += check_changes(saved, cfg, opts, task, hw.world_size)
            notes += task.check_resume(saved, cfg, opts, datamodule) if task.check_resume else []
        model = task.build_model(cfg, opts, hw, datamodule)
        if ckpt is not None:
            check_same_network(Path(ckpt), saved, model, "resume")
    except ConfigError as err:
        fail(str(err))
    wrap = (task.wrap_policy or block_types)(getattr(model, "net", model))
    rank_zero = launched_as_global_zero()  # node 0's first process only: every node has a first process
    with hold_output_dir(cfg, rank_zero):  # one run at a time in an --output-dir
        if rank_zero:
            print(hw.summary(), flush=True)  # the run's first line, before Lightning's own
            for note in notes:  # the options changed on resume, and what is done with each
                print(f"resume: {note}", flush=True)
        hardware.apply_backend_flags(cfg)
        if cfg.profile:
            from .profiling import profile

            return profile(cfg, hw, model, datamodule, wrap=wrap)
        logger_version = (saved.get("exact_resume") or {}).get("logger_version")  # a resumed run logs on in its run
        trainer = build_trainer(cfg, hw, wrap=wrap, logger_version=logger_version, task=task)
        trainer.callbacks.append(RunRecord(cfg, opts, hw.world_size))  # type: ignore[attr-defined]  # for --resume
        return _fit_and_test(task, cfg, opts, hw, trainer, model, datamodule, ckpt)


def _fit_and_test(
    task: Task, cfg: Config, opts: Any, hw: Any, trainer: Any, model: Any, datamodule: Any, ckpt: str | None
) -> dict[str, float]:
    from .checkpoints import last_path
    from .guards import explain_failures, scale_batch_size
    from .monitors import LogStepThroughputMonitor

    if cfg.auto_batch_size:
        with explain_failures(cfg, trainer, datamodule, task.unit):
            cfg.batch_size = scale_batch_size(trainer, model, datamodule)
    if trainer.is_global_zero:
        options = {**asdict(cfg), **asdict(opts)}
        save_yaml(options, Path(cfg.output_dir) / "config.yaml")
        global_batch = cfg.batch_size * hw.world_size * cfg.accumulate_grad_batches
        for logger in trainer.loggers:
            logger.log_hyperparams({**options, "global_batch_size": global_batch, "resolved": hw.summary()})

    with explain_failures(cfg, trainer, datamodule, task.unit):  # nan loss, out of memory, Ctrl-C: one line
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)
    checkpoint = trainer.checkpoint_callback
    best = None if cfg.fast_dev_run or checkpoint is None else (checkpoint.best_model_path or None)
    fit_metrics = {k: float(v) for k, v in trainer.logged_metrics.items()}
    # A path, never None where there is one: under SLURM Lightning would test the newest hpc_ckpt_N.ckpt, however old
    last = last_path(cfg.output_dir)
    tested = best or (str(last) if last.is_file() and not cfg.fast_dev_run else None)
    with explain_failures(cfg, trainer, datamodule, task.unit):  # a stop during the test too: its own line and code
        trainer.test(model, datamodule=datamodule, ckpt_path=tested, weights_only=True)
    metrics = {**fit_metrics, **{k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}}
    if best is not None:
        metrics[task.monitor] = float(checkpoint.best_model_score)
    if trainer.is_global_zero:
        nan = float("nan")
        meter = next((c for c in trainer.callbacks if isinstance(c, LogStepThroughputMonitor)), None)
        # the logged rate of the last logging steps; without two logging steps, the average over the whole run
        per_device = metrics.get("train/device/samples_per_sec") or (meter.average_rate() if meter else None)
        throughput = f"{per_device * hw.world_size:.0f} {task.unit}/s" if per_device else "n/a (no training step)"
        print(
            f"{'best' if best else 'last'} {task.monitor}={metrics.get(task.monitor, nan):.4f}  "
            f"{task.test_metric}={metrics.get(task.test_metric, nan):.4f}  train throughput={throughput}  "
            f"checkpoints: {last.parent.resolve()}"
        )
    return metrics


def run(task: Task, argv: list[str] | None = None) -> None:
    """train.py's whole body: `main`, with the exits a terminal and a scheduler expect."""
    from .quiet import set_up_warnings

    set_up_warnings()
    try:
        main(task, argv)
    except KeyboardInterrupt:  # Ctrl-C outside the training loop (start-up, the final test): nothing more to save
        print("stopped by SIGINT", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
    finally:  # a further signal while Python shuts down (loader workers, logger threads) keeps the exit code
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, signal.SIG_IGN)
