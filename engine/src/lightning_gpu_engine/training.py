"""`train(task)`: a task trained end to end. Parse, check the output dir, resolve the hardware, build, fit, test, and
print one summary line. The entry point's side of the line: every ConfigError raised below ends here, as one line.

Layer 8: imports `config`, `tools`, `checkpoint`, `perf`, `profiling`, `reliability`, `task` and `trainer`.
"""

from __future__ import annotations

import atexit
import signal
import sys
import warnings
from contextlib import ExitStack
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from lightning_gpu_engine.checkpoint.staging import hold_output, shown, stage_output
from lightning_gpu_engine.config.cli import engine_options_hidden, fail, parse_run, save_yaml
from lightning_gpu_engine.config.options import Config, check_logger
from lightning_gpu_engine.config.quiet import set_up_warnings
from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.perf.compile_cache import check_compile_cache
from lightning_gpu_engine.task import Task
from lightning_gpu_engine.tools.rundir import check_output_dir, check_resume_named, last_path
from lightning_gpu_engine.tools.signals import WORKER_IGNORES, end_with_launcher, ignore_while_exiting

# The handlers a run stopped by a signal set aside as it ended, for a process that trains again (a test, a notebook)
_SET_ASIDE: dict[int, Any] = {}


def train(task: Task, argv: list[str] | None = None) -> dict[str, float]:
    """`task` trained with the options of `argv` (the command line's by default): its logged and test metrics. The
    whole of train.py, of `<project>-train` and of a task's own script, with the exits a terminal and a scheduler
    expect: warnings in one line each, a bad option or a stop as one line and its exit code (SystemExit), Ctrl-C
    outside the training loop 130. A run that a signal stopped ignores further ones from then on, so that a Ctrl-C
    pressed again while Python exits keeps the code; any other run, once Python exits."""
    set_up_warnings()
    for signum, handler in _SET_ASIDE.items():  # this process goes on training: the stops count again
        signal.signal(signum, handler)
    _SET_ASIDE.clear()
    try:
        return _train(task, argv)
    except KeyboardInterrupt:  # Ctrl-C outside the training loop (start-up, the final test): nothing more to save
        _ignore_further_stops()
        print("stopped by SIGINT", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
    except SystemExit as end:
        if isinstance(end.code, int) and end.code > 128:  # 128 + the signal that stopped it
            _ignore_further_stops()
        raise
    finally:
        atexit.unregister(ignore_while_exiting)
        atexit.register(ignore_while_exiting)  # the last one registered: it runs first, before loader workers end
        _leave_process_group()


def _ignore_further_stops() -> None:
    """What `ignore_while_exiting` does, keeping each handler it replaces."""
    for signum in WORKER_IGNORES:
        handler = signal.signal(signum, signal.SIG_IGN)
        _SET_ASIDE[signum] = signal.SIG_DFL if handler is None else handler  # None: a handler set outside Python


def _train(task: Task, argv: list[str] | None = None) -> dict[str, float]:
    cfg, opts = parse_run(argv, task)  # before the heavy imports, so a bad flag answers at once
    end_with_launcher()
    try:  # what the names and headers of files tell, before seconds of imports
        check_logger(cfg)
        stage_output(cfg)  # an object-storage --output-dir: a staging folder here, --resume's checkpoint fetched
        check_output_dir(cfg)
        check_compile_cache(cfg)
        check_resume_named(cfg)
        if task.check_inputs is not None:
            task.check_inputs(cfg, opts)
    except ConfigError as err:
        fail(str(err))
    import lightning as L

    from lightning_gpu_engine.checkpoint.averaged import UseTheAverage
    from lightning_gpu_engine.checkpoint.checks import check_checkpoint, check_same_network
    from lightning_gpu_engine.checkpoint.saving import resume_path
    from lightning_gpu_engine.checkpoint.sharded import check_format
    from lightning_gpu_engine.perf import hardware
    from lightning_gpu_engine.perf.networks import check_module
    from lightning_gpu_engine.reliability.resume_changes import (
        RunRecord,
        check_changes,
        keep_batch_size,
        optimizer_changes,
    )
    from lightning_gpu_engine.trainer.launchers import check_launcher, launched_as_global_zero
    from lightning_gpu_engine.trainer.trainer import build_trainer, fsdp_units

    L.seed_everything(cfg.seed, workers=True, verbose=False)  # before the model, so its initial weights follow --seed
    try:
        hw = hardware.resolve(cfg, fsdp2=task.fsdp2, channels_last=task.channels_last, compile_off=task.compile_off)
        if task.resolve is not None:
            hw = replace(hw, choices={**hw.choices, **task.resolve(cfg, opts, hw)})
        check_launcher(cfg)
        check_format(cfg, task.fsdp2, task.lightning_strategy, hw.world_size)
        ckpt = resume_path(cfg.output_dir, cfg.resume)
        # Read before the data and the model are built: an option the checkpoint refuses must download nothing
        saved: dict[str, Any] = check_checkpoint(Path(ckpt), tensors=False) if ckpt is not None else {}
        notes = keep_batch_size(cfg, saved) if ckpt is not None else []
        datamodule = task.build_data(cfg, opts, hw)
        if ckpt is not None:
            notes += check_changes(saved, cfg, opts, task, hw.world_size)
            notes += task.check_resume(saved, cfg, opts, datamodule) if task.check_resume else []
        model = task.build(cfg, opts, hw, datamodule)
        hw, broken = check_module(task, model, cfg, hw)  # the module's shape against the options, as one line each
        if ckpt is not None:
            check_same_network(Path(ckpt), saved, model, "resume")
            notes += optimizer_changes(saved, cfg, model)
    except ConfigError as err:
        fail(str(err))
    wrap = fsdp_units(task, model)
    rank_zero = launched_as_global_zero()  # node 0's first process only: every node has a first process
    with ExitStack() as held:
        try:
            held.enter_context(hold_output(cfg, rank_zero))  # one run at a time in an --output-dir
        except ConfigError as err:  # another run holds it, or the disk is full
            fail(str(err))
        if rank_zero:
            print(hw.summary(), flush=True)  # the run's first line, before Lightning's own
            for promise in broken:
                print(f"warning: {promise}", flush=True)
            for note in notes:  # the options changed on resume, and what is done with each
                print(f"resume: {note}", flush=True)
        hardware.apply_backend_flags(cfg)
        cache = hardware.use_compile_cache(cfg, hw)  # before the first compile, the profile's too
        if cache is not None and rank_zero:
            print(cache.found, flush=True)
        if cfg.profile:
            from lightning_gpu_engine.profiling import profile

            return profile(cfg, hw, model, datamodule, wrap=wrap, task=task)
        logger_version = (saved.get("exact_resume") or {}).get("logger_version")  # a resumed run logs on in its run
        # the summary line says so when no validation ran, or the task never logs its monitored metric
        warnings.filterwarnings("ignore", r"`ModelCheckpoint\(monitor=.*could not find the monitored key", UserWarning)
        if ckpt is not None:  # what a routine resume finds, and Lightning warns of as if it were a mistake
            warnings.filterwarnings("ignore", r"Checkpoint directory .* exists and is not empty", UserWarning)
        trainer = build_trainer(
            cfg, hw, wrap=wrap, logger_version=logger_version, task=task, resumed_step=saved.get("global_step")
        )
        trainer.callbacks.append(RunRecord(cfg, opts, hw.world_size, task))  # type: ignore[attr-defined]  # for --resume
        trainer.callbacks.insert(0, UseTheAverage())  # type: ignore[attr-defined]  # the test's weights: --ema's average
        if cache is not None:  # saves the graphs compiled in this run for the next
            trainer.callbacks.append(cache)  # type: ignore[attr-defined]
        return _fit_and_test(task, cfg, opts, hw, trainer, model, datamodule, ckpt)


def _fit_and_test(
    task: Task, cfg: Config, opts: Any, hw: Any, trainer: Any, model: Any, datamodule: Any, ckpt: str | None
) -> dict[str, float]:
    from lightning_gpu_engine.perf.monitors import LogStepThroughputMonitor
    from lightning_gpu_engine.reliability.failures import explain_failures
    from lightning_gpu_engine.reliability.guards import scale_batch_size

    if cfg.auto_batch_size:
        with explain_failures(cfg, trainer, datamodule, task.unit):
            cfg.batch_size = scale_batch_size(trainer, model, datamodule)
    if trainer.is_global_zero:
        hidden = {*engine_options_hidden(task), *(task.unused_options(opts) if task.unused_options else ())}
        options = {k: v for k, v in {**asdict(cfg), **asdict(opts)}.items() if k not in hidden}
        save_yaml(options, Path(cfg.output_dir) / "config.yaml")
        global_batch = cfg.batch_size * hw.world_size * cfg.accumulate_grad_batches
        # what Lightning logs itself from the model's and the data's hparams is left to it: MLflow refuses a second
        # value for a param (compile: None as an option, False as the model's)
        own = {k: v for k, v in options.items() if k not in {**datamodule.hparams, **model.hparams}}
        for logger in trainer.loggers:
            logger.log_hyperparams({**own, "global_batch_size": global_batch, "resolved": hw.summary()})

    with explain_failures(cfg, trainer, datamodule, task.unit):  # nan loss, out of memory, Ctrl-C: one line
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)
    checkpoint = trainer.checkpoint_callback
    best = None if cfg.fast_dev_run or checkpoint is None else (checkpoint.best_model_path or None)
    fit_metrics = {k: float(v) for k, v in trainer.logged_metrics.items()}
    # A path, never None where there is one: under SLURM Lightning would test the newest hpc_ckpt_N.ckpt, however old
    last = last_path(cfg.output_dir)
    tested = best or (str(last) if last.exists() and not cfg.fast_dev_run else None)
    with (
        explain_failures(cfg, trainer, datamodule, task.unit),  # a stop during the test too: its own line and code
        warnings.catch_warnings(),  # an averaging callback finds only the average there (UseTheAverage), as meant
    ):
        warnings.filterwarnings("ignore", "The checkpoint was not created with WeightAveraging", UserWarning)
        warnings.filterwarnings("ignore", "You're using the WeightAveraging callback, but loading", UserWarning)
        trainer.test(model, datamodule=datamodule, ckpt_path=tested, weights_only=True)
    metrics = {**fit_metrics, **{k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}}
    if best is not None and checkpoint.best_model_score is not None:  # None: resumed from another run's checkpoint
        metrics[task.monitor] = float(checkpoint.best_model_score)
    if trainer.is_global_zero:
        nan = float("nan")
        meter = next((c for c in trainer.callbacks if isinstance(c, LogStepThroughputMonitor)), None)
        # the logged rate of the last logging steps; without two logging steps, the average over the whole run
        per_device = metrics.get("train/device/samples_per_sec") or (meter.average_rate() if meter else None)
        throughput = f"{per_device * hw.world_size:.0f} {task.unit}/s" if per_device else "n/a (no training step)"
        said = task.summary(datamodule) if task.summary is not None else ""
        extra = f"{said}  " if said else ""
        print(
            f"{monitored(task, metrics, best is not None, trainer.global_step, cfg.val_every)}  "
            f"{task.test_metric}={metrics.get(task.test_metric, nan):.4f}  {extra}train throughput={throughput}  "
            f"checkpoints: {shown(last.parent.resolve())}"
        )
    return metrics


def monitored(task: Task, metrics: dict[str, float], best: bool, step: int, val_every: int | None) -> str:
    """The summary's first words: the best (or last) monitored value, or why there is none."""
    if task.monitor in metrics:
        return f"{'best' if best else 'last'} {task.monitor}={metrics[task.monitor]:.4f}"
    stage = task.monitor.split("/", 1)[0] + "/"
    logged = sorted(k for k in metrics if k.startswith(stage))
    if logged:  # validation ran, but the task logs its metric under another name
        return f"{task.monitor} was never logged (validation logged {', '.join(logged)}): no best checkpoint"
    first = f"the first --val-every step, {val_every}" if val_every else "the first epoch's end"
    return f"no validation ran (training ended at step {step}, before {first}): no best checkpoint"


def _leave_process_group() -> None:
    """Gloo's worker threads, left to the interpreter's teardown, abort the exit now and then ("terminate called
    without an active exception", exit -6) after a run that succeeded: leave the group while Python is whole."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
