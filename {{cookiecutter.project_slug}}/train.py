"""Train, then test the best checkpoint: `python train.py --help` lists every option with its default and reason."""

from {{ cookiecutter.package_name }}.engine import main as run_task
from {{ cookiecutter.package_name }}.engine import run
from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK


def main(argv: list[str] | None = None) -> dict[str, float]:
    return run_task(TASK, argv)


if __name__ == "__main__":
    run(TASK)
