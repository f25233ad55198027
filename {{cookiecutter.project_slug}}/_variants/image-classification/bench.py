"""Training throughput of each speed setting on this machine, and what Lightning costs against a plain PyTorch loop.

    python bench.py                                # CUDA: ResNet-50 at 224 px; CPU: a tiny ResNet-18 configuration
    python bench.py --only bf16+cl+compile,loader  # some settings only; the table's first column has the names
    python bench.py --task my_task                 # your own task's rows instead (its TASK): --task --help says more

`folder` trains the default setting end to end from photo-like JPEGs (500x375, ~100 KB) through the real loader,
decoded by the workers and, with CUDA, on the GPU; `loader` measures the loaders alone. One table is printed; the
numbers, the device, the versions and the command go to --json, each row as soon as it is measured.
"""

from {{ cookiecutter.package_name }}.commands.bench import (
    cli,
    default_setting,
    main,
)

__all__ = ["default_setting", "main"]

if __name__ == "__main__":
    cli()
