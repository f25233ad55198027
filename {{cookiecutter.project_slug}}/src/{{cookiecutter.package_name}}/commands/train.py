"""`train.py` and `<project>-train`: train, then test the best checkpoint. The sweep's trials of an installed project
run this file as a script."""

from lightning_gpu_engine import main as run_task
from lightning_gpu_engine import run

from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK


def main(argv: list[str] | None = None) -> dict[str, float]:
    return run_task(TASK, argv)


def cli(argv: list[str] | None = None) -> None:
    run(TASK, argv)


if __name__ == "__main__":
    cli()
