"""`sweep.py` and `<project>-sweep`: hyperparameter search, each trial a run of the train script."""

from pathlib import Path

from lightning_gpu_engine import set_up_warnings
from lightning_gpu_engine.sweep import main

from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK


def cli(train_script: Path | None = None) -> None:
    """`train_script`: what each trial runs; a clone's own train.py, or by default this package's copy of it."""
    set_up_warnings()
    main(TASK, train_script or Path(__file__).with_name("train.py"))
