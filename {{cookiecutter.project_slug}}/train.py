"""Train, then test the best checkpoint: `python train.py --help` lists every option with its default and reason."""

from {{ cookiecutter.package_name }}.commands.train import cli, main

__all__ = ["main"]

if __name__ == "__main__":
    cli()
