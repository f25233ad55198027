"""`train.py` and `<project>-train`: train, then test the best checkpoint. The sweep's trials of an installed project
run this file as a script."""

from lightning_gpu_engine import train

from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK


def main(argv: list[str] | None = None) -> dict[str, float]:
    return train(TASK, argv)


def cli() -> None:
    """`train.py`, and the installed `<project>-train`."""
    main()  # not returned: a console script exits with what its function returns, and metrics are no exit code


if __name__ == "__main__":
    cli()
