"""Training throughput of the language model per speed setting, and what Lightning costs against a plain PyTorch loop.

    python bench.py                          # CUDA: GPT-2 124M at context 1024; CPU: the tiny model at context 64
    python bench.py --only bf16+compile      # some settings only; the table's first column has the names
    python bench.py --task my_task           # your own task's rows instead (its TASK): --task --help says more

Rows: tokens/s, MFU (PaLM's formula over the engine's perf/peaks.py peak) and peak memory for precision x compile x
FSDP2 with activation checkpointing; with CUDA also gpt2-xl (1.5B) under FSDP2 + activation checkpointing on one
GPU. The default setting is timed against a hand-written loop in interleaved rounds. The numbers, the device, the
versions and the command go to --json, each row as soon as it is measured.
"""

from {{ cookiecutter.package_name }}.commands.bench import (
    cli,
    main,
)

__all__ = ["main"]

if __name__ == "__main__":
    cli()
