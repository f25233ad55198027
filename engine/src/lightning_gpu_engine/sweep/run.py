"""`sweep.py`: its options, the study's storage, and the run from first trial to report."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lightning_gpu_engine import ConfigError, OneLineParser, Task, check_writable_dir, fail
from lightning_gpu_engine.bench.task_module import load_task, peek_task

from .space import SpaceError, check_values, fixed_names, load_space

PRUNERS = ("median", "hyperband", "none")
CREATION_TRIES = 10  # a new database that several workers create at once: the losers wait for the winner's tables
STUDY = "sweep"  # one study per storage: the sweep directory (or the shared database) is the study
USAGE = """Hyperparameter search on Optuna: each trial is `python train.py` (or, with --task, `python my_task.py`) with
the flags after the sweep's own, the searched options from --space, and --output-dir SWEEP_DIR/trial-NNNN.

    python sweep.py --space configs/sweep.yaml --trials 20 --output-dir sweeps/first --max-epochs 5
    python sweep.py --task my_task --space my_space.yaml --trials 20 --output-dir sweeps/mine --data-path /data
    python sweep.py --report sweeps/first
"""


def parse(argv: list[str] | None, task: Task, prog: str = "sweep.py") -> tuple[Any, list[str]]:
    parser = OneLineParser(prog=prog, description=USAGE, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument(
        "--task",
        metavar="MODULE",
        help="sweep your own task instead: a module (my_task, team.my_task) or .py file whose TASK is the Task; "
        "each trial runs that file",
    )
    parser.add_argument("--space", help="YAML file: option -> {low, high[, log]}, {choices}, or a fixed value")
    parser.add_argument("--trials", type=int, default=20, help="finished trials the study should hold (default 20)")
    parser.add_argument("--output-dir", help="SWEEP_DIR: the study (study.db), trial-NNNN/ folders, report, plots")
    parser.add_argument("--metric", default=task.monitor, help=f"what is optimised (default {task.monitor})")
    parser.add_argument("--direction", choices=("min", "max"), help=f"default: {task.mode} for {task.monitor}")
    parser.add_argument("--pruner", choices=PRUNERS, default="median", help="stop hopeless trials (default median)")
    parser.add_argument(
        "--storage",
        help="sqlite:///, postgresql://, mysql:// URL or journal:PATH (default: SQLite "
        "in SWEEP_DIR); shared by several sweep.py processes, they split the trials",
    )
    parser.add_argument("--parallel", type=int, default=1, help="trials at once on this machine (default 1)")
    parser.add_argument("--devices-per-trial", type=int, default=1, help="GPUs per parallel trial (default 1)")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the sampler's seed: trial N draws from (seed, N), so workers sharing a study and a "
        "continued sweep never repeat each other (default 0)",
    )
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=300.0,
        help="seconds without a heartbeat after "
        "which another worker takes a running trial as lost and continues it (default 300)",
    )
    parser.add_argument("--report", metavar="SWEEP_DIR", help="only print the report of a sweep, and write its plots")
    args, rest = parser.parse_known_args(argv)
    if args.report is None and (args.space is None or args.output_dir is None):
        fail("--space and --output-dir are required (or --report SWEEP_DIR)")
    if not args.heartbeat_timeout > 0:
        fail(f"--heartbeat-timeout: must be a positive number of seconds, got {args.heartbeat_timeout}")
    for name in ("trials", "parallel", "devices_per_trial"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')}: must be a positive integer, got {getattr(args, name)}")
    return args, rest


def storage(url: str | None, sweep_dir: Path) -> Any:
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    if url is not None and url.startswith("journal:"):
        path = Path(url.removeprefix("journal:"))
        if not path.parent.is_dir():
            fail(f"--storage: {path.parent} does not exist; the journal file goes in an existing folder")
        try:
            return JournalStorage(JournalFileBackend(str(path)))
        except OSError as err:  # a read-only filesystem, a journal file that cannot be written
            fail(f"--storage: cannot write {path} ({err.strerror}); the journal goes where every worker can write")
    url = url or f"sqlite:///{sweep_dir.resolve() / 'study.db'}"
    if "://" not in url or url.split("://")[0].split("+")[0] not in ("sqlite", "postgresql", "mysql"):
        fail(f"--storage: {url!r} is not sqlite:///PATH, postgresql://..., mysql://... or journal:PATH")
    tries = 0
    while True:
        try:
            return RDBStorage(url)
        except Exception as err:  # no driver (ImportError), no server, no access, a file that is not a database
            tries += 1
            if tries < CREATION_TRIES and racing(err):
                time.sleep(0.2 * tries)
                continue
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            fail(f"--storage: cannot open {url}: {reason}")


def racing(err: Exception) -> bool:
    """Whether `err` is another worker creating the same new database's tables at this moment (two sweeps started at
    once: "UNIQUE constraint failed: alembic_version", "table studies already exists"); tried again, the tables are
    there."""
    from sqlalchemy.exc import IntegrityError, OperationalError

    text = str(err)
    return isinstance(err, IntegrityError) or (
        isinstance(err, OperationalError) and ("already exists" in text or "database is locked" in text)
    )


def main(task: Task | None, script: Path | None, argv: list[str] | None = None, prog: str = "sweep.py") -> None:
    """`task` trained by `script` (train.py), unless --task names another: then each trial runs that task's file.
    Without a task of its own (`python -m lightning_gpu_engine sweep`), --task is needed."""
    given = peek_task(argv)
    if given is not None:
        found = load_task(given)
        task, program, shown = found.task, found.program, found.shown
    elif task is None or script is None:
        fail("--task: name the module or .py file whose TASK the trials train (e.g. --task my_task)")
    else:
        program, shown = [str(script)], f"python {script.name}"
    args, rest = parse(argv, task, prog)
    try:
        import optuna  # noqa: F401
    except ImportError:
        fail("sweep.py needs Optuna and matplotlib, the `sweep` extra: pip install -e '.[sweep]'")
    from .report import report

    if args.report is not None:
        report(load_study(args.storage, Path(args.report)), Path(args.report), args.metric, "report")
        return
    sweep_dir = Path(args.output_dir)
    try:
        params = load_space(args.space, task, shown)
        with tempfile.TemporaryDirectory() as scratch:  # nothing is written: the sweep folder is not made yet
            check_values(params, args.space, task, rest, f"{scratch}/x")
        clash = fixed_names(rest, task.options) & {p.name for p in params}
        if clash:
            raise SpaceError(f"--space: {', '.join(sorted(clash))} is both searched and fixed by a flag; leave one out")
    except SpaceError as err:
        fail(str(err))
    direction = args.direction or (task.mode if args.metric == task.monitor else None)
    if direction is None:
        fail(f"--direction: say min or max for --metric {args.metric}")
    slots = gpu_slots(args.parallel, args.devices_per_trial)
    try:
        check_writable_dir(sweep_dir, "output_dir")
    except ConfigError as err:
        fail(str(err))
    created = not sweep_dir.exists()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    try:
        study = open_study(args, sweep_dir, direction)
    except SystemExit:  # a storage that cannot be opened leaves nothing behind
        if created:
            shutil.rmtree(sweep_dir)
        raise
    from .trials import Sweep

    timeout = args.heartbeat_timeout
    sweep = Sweep(study, params, rest, sweep_dir, args.trials, args.metric, program, shown, slots, timeout)
    print(f"sweep: {args.trials} trials of {task.name}, {args.metric} ({study.direction.name.lower()}), {sweep_dir}")
    signum = sweep.run()
    report(study, sweep_dir, args.metric)
    if signum is not None:
        print(f"stopped by {signal.Signals(signum).name}; run the same command again to continue", file=sys.stderr)
        raise SystemExit(128 + signum)


def open_study(args: Any, sweep_dir: Path, direction: str) -> Any:
    import optuna

    from .sampler import TrialSeededTPE

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # sweep.py prints one line per trial itself
    pruner = {
        "median": optuna.pruners.MedianPruner(n_startup_trials=2),
        "hyperband": optuna.pruners.HyperbandPruner(),
        "none": optuna.pruners.NopPruner(),
    }[args.pruner]
    return optuna.create_study(
        study_name=STUDY,
        storage=storage(args.storage, sweep_dir),
        load_if_exists=True,
        direction="minimize" if direction == "min" else "maximize",
        sampler=TrialSeededTPE(args.seed),
        pruner=pruner,
    )


def load_study(url: str | None, sweep_dir: Path) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if url is None and not (sweep_dir / "study.db").is_file():
        fail(f"--report: no study in {sweep_dir} (no study.db); give the sweep's --output-dir, or its --storage")
    try:
        return optuna.load_study(study_name=STUDY, storage=storage(url, sweep_dir))
    except KeyError:
        fail(f"--report: the storage holds no sweep.py study named {STUDY!r}")


def gpu_slots(parallel: int, per_trial: int) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES of each parallel trial; None everywhere on a machine without CUDA GPUs."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    if not gpus:
        return [None] * parallel
    if parallel * per_trial > len(gpus):
        need = parallel * per_trial
        fail(f"--parallel: {parallel} trials x {per_trial} GPU(s) need {need}, this machine has {len(gpus)}")
    return [",".join(gpus[i * per_trial : (i + 1) * per_trial]) for i in range(parallel)]
