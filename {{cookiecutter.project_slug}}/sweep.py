"""Hyperparameter search: `python sweep.py --space configs/sweep.yaml --trials 20 --output-dir sweeps/first [flags]`.
`python sweep.py --help` lists its options; every flag after them is train.py's, fixed for every trial. With
`--task my_task` the trials train your own task's file instead: `python sweep.py --task my_task --space ... [flags]`."""

from pathlib import Path

from {{ cookiecutter.package_name }}.engine import set_up_warnings
from {{ cookiecutter.package_name }}.sweep.run import main
from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK

if __name__ == "__main__":
    set_up_warnings()
    main(TASK, Path(__file__).with_name("train.py"))
