"""Hyperparameter search: `python sweep.py --space configs/sweep.yaml --trials 20 --output-dir sweeps/first [flags]`.
`python sweep.py --help` lists its options; every flag after them is train.py's, fixed for every trial. With
`--task my_task` the trials train your own task's file instead: `python sweep.py --task my_task --space ... [flags]`."""

from pathlib import Path

from {{ cookiecutter.package_name }}.commands.sweep import cli

if __name__ == "__main__":
    cli(Path(__file__).with_name("train.py"))
