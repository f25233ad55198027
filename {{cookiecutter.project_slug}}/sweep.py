"""Hyperparameter search: `python sweep.py --space configs/sweep.yaml --trials 20 --output-dir sweeps/first [flags]`.
`python sweep.py --help` lists its options; every flag after them is train.py's, fixed for every trial."""

from pathlib import Path

from {{ cookiecutter.package_name }}.engine.quiet import set_up_warnings
from {{ cookiecutter.package_name }}.sweep.run import main
from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK

if __name__ == "__main__":
    set_up_warnings()
    main(TASK, Path(__file__).with_name("train.py"))
