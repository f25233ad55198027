"""Training throughput of the language model per speed setting, and what Lightning costs against a plain PyTorch loop.

    python bench.py                          # CUDA: GPT-2 124M at context 1024; CPU: the tiny model at context 64
    python bench.py --only bf16+compile      # some settings only; the table's first column has the names
    python bench.py --task my_task           # your own task's rows instead (its TASK): --task --help says more

Rows: tokens/s, MFU (PaLM's formula over the engine's perf/peaks.py peak) and peak memory for precision x compile x
FSDP2 with activation checkpointing; with CUDA also gpt2-xl (1.5B) under FSDP2 + activation checkpointing on one
GPU. The default setting is timed against a hand-written loop in interleaved rounds. The numbers, the device, the
versions and the command go to --json, each row as soon as it is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_gpu_engine import ConfigError, OneLineParser, check_output, fail, set_up_warnings
from lightning_gpu_engine.bench import check_task, peek_task

from {{ cookiecutter.package_name }}.tasks.language_model.config import SIZES

if TYPE_CHECKING:  # torch, Lightning and the task's bench load once the flags are read
    from {{ cookiecutter.package_name }}.tasks.language_model.bench import (
        LMSetting,
    )

# The CPU's: 200 steps of ~10 ms, so that a round outlasts the machine's jitter (6 steps gave rounds 0.49 to 2.46)
DEFAULTS = {
    "cuda": {"model": "gpt2", "context": 1024, "batch_size": 32, "vocab_size": 50257, "warmup": 10, "steps": 50},
    "cpu": {"model": "tiny", "context": 64, "batch_size": 8, "vocab_size": 257, "warmup": 10, "steps": 200},
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="bench.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", metavar="MODULE", help="bench your own task (a module or .py file with TASK) instead")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="auto: CUDA when visible")
    parser.add_argument("--model", choices=tuple(SIZES), help="size (default: gpt2 on CUDA, tiny on CPU)")
    parser.add_argument("--context", type=int, help="tokens per sequence (default: 1024 on CUDA, 64 on CPU)")
    parser.add_argument("--batch-size", type=int, help="sequences per step (default: 32 on CUDA, 8 on CPU)")
    parser.add_argument(
        "--vocab-size", type=int, help="default: GPT-2's 50257 on CUDA, the byte tokenizer's 257 on CPU"
    )
    parser.add_argument("--warmup", type=int, help="untimed steps first (default: 10 on CUDA and CPU)")
    parser.add_argument("--steps", type=int, help="timed steps, in windows of steps/5 (default: 50 CUDA, 200 CPU)")
    parser.add_argument("--only", help="comma-separated setting names; default: every setting")
    parser.add_argument("--compile", action="store_true", help="CPU: add compiled settings (always there on CUDA)")
    parser.add_argument("--rounds", type=int, default=3, help="Lightning and plain PyTorch in turn (%(default)s)")
    parser.add_argument("--peak-tflops", type=float, help="one device's dense bf16 peak, for a GPU not in peaks.py")
    parser.add_argument("--json", default="bench-results.json", help="where the results go (default: %(default)s)")
    args = parser.parse_args(argv)
    for key in ("context", "batch_size", "vocab_size", "steps", "rounds"):
        if getattr(args, key) is not None and getattr(args, key) < 1:
            fail(f"--{key.replace('_', '-')}: must be a positive integer, got {getattr(args, key)}")
    if args.warmup is not None and args.warmup < 0:
        fail(f"--warmup: must be 0 or more, got {args.warmup}")
    try:
        check_output(args.json, "json")
    except ConfigError as err:
        fail(str(err))
    import torch  # the flags are good: the device is asked for

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        fail("--device: cuda asked for, but no CUDA GPU is visible; use cpu or auto")
    for key, value in DEFAULTS[args.device].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def matrix(device: str, with_compile: bool) -> tuple[list[LMSetting], LMSetting]:
    """Every setting, the default (what `python train.py` resolves to) among them, and the default."""
    from {{ cookiecutter.package_name }}.tasks.language_model.bench import (
        LMSetting,
    )

    if device == "cpu":
        settings = [LMSetting("32-true", False, False), LMSetting("bf16-mixed", False, False)]
        settings += [LMSetting("32-true", False, True)]
        settings += [LMSetting("32-true", True, False)] if with_compile else []
        return settings, settings[0]
    default = LMSetting("bf16-mixed", True, False)
    settings = [LMSetting("32-true", False, False), LMSetting("bf16-mixed", False, False), default]
    settings += [LMSetting("bf16-true", True, False), LMSetting("bf16-mixed", True, True)]
    return [*settings, LMSetting("bf16-mixed", True, True, model="gpt2-xl")], default


def table(results: dict[str, Any]) -> str:
    from lightning_gpu_engine.bench import ratio_line, spread

    lines = [
        f"{results['device']} | torch {results['torch']} | lightning {results['lightning']} | {results['model']} "
        f"context {results['context']}, batch {results['batch_size']} | {results['warmup']} warm-up + "
        f"{results['steps']} timed steps | MFU: PaLM's 6N + 12·L·H·Q·T over {results['peak'] or 'no known peak'}",
        f"{'setting':<34}{'tokens/s':>12}{'spread':>8}{'step ms':>9}{'start-up s':>12}{'peak GiB':>10}{'MFU':>7}",
    ]
    for row in [*results["settings"], *([results["plain"]] if results["plain"] else [])]:
        label = row["name"] + (" (default)" if row.get("default") else "")
        memory = "n/a" if row["peak_memory_gib"] is None else f"{row['peak_memory_gib']:.2f}"
        mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
        lines.append(
            f"{label:<34}{row['tokens_per_s']:>12.0f}{spread(row['windows']):>8.0%}{row['step_ms']:>9.1f}"
            f"{row['startup_s']:>12.1f}{memory:>10}{mfu:>7}"
        )
    if results["plain"]:
        lines.append(ratio_line(results))
    return "\n".join(lines)


def measure(args: argparse.Namespace, command: str) -> dict[str, Any]:
    import lightning
    import torch
    from lightning_gpu_engine import device_peak
    from lightning_gpu_engine.bench import interleaved_rounds, peak_flops, write_json

    from {{ cookiecutter.package_name }}.tasks.language_model.bench import (
        LMSpec,
        run_lightning,
        run_plain,
    )

    spec = LMSpec(
        device=args.device,
        batch_size=args.batch_size,
        warmup=args.warmup,
        steps=args.steps,
        model=args.model,
        context=args.context,
        vocab_size=args.vocab_size,
    )
    settings, default = matrix(spec.device, args.compile or spec.device == "cuda")
    if args.only is not None:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        for name in names:
            if name not in [s.name for s in settings]:
                fail(f"--only: {name!r} is not one of: {', '.join(s.name for s in settings)}")
        settings = [s for s in settings if s.name in names]
    found = device_peak(torch.device(spec.device), "bf16-mixed")
    results: dict[str, Any] = {
        "command": command,
        **dataclasses.asdict(spec),
        "device": torch.cuda.get_device_name() if spec.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "cuda": torch.version.cuda if spec.device == "cuda" else None,
        "peak": found[1] if found else None,
        "finished": False,
        "settings": [],
        "plain": None,
        "lightning_over_plain": None,
        "lightning_over_plain_rounds": [],
    }
    save = lambda: write_json(Path(args.json), results)  # noqa: E731 - after every row: a crash keeps the rows so far
    save()
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:

        def row(run: Any, setting: LMSetting, name: str) -> dict[str, Any]:
            timing = run(spec, setting, Path(workdir, name.replace("/", "-").replace(" ", "-")))
            tokens_per_s = timing.samples_per_s * spec.context  # the clock counts sequences
            peak = peak_flops(spec.device, setting.precision, spec.device == "cuda", args.peak_tflops)  # TF32 on CUDA
            mfu = spec.flops_per_token(setting) * tokens_per_s / peak if peak else None
            timing_row = {k: v for k, v in dataclasses.asdict(timing).items() if k != "samples_per_s"}
            return {"name": name, **dataclasses.asdict(setting), **timing_row, "tokens_per_s": tokens_per_s, "mfu": mfu}

        for setting in settings:
            results["settings"].append(row(run_lightning, setting, setting.name) | {"default": setting == default})
            save()
            if setting == default:
                results["plain"] = row(run_plain, setting, f"plain PyTorch, {setting.name}")
                first = (results["settings"][-1]["tokens_per_s"], results["plain"]["tokens_per_s"])
                runs = (run_lightning, run_plain)
                interleaved_rounds(results, first, args.rounds, runs, spec, setting, Path(workdir), save)
    results["finished"] = True
    save()
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    task = peek_task(argv)
    if task is not None:  # a team's own task: rows of its own, built through its TASK
        check_task(task)
        from lightning_gpu_engine.bench import any_task

        return any_task.main(argv)
    args = parse_args(argv)
    from lightning_gpu_engine.bench import quiet_trainers

    command = shlex.join(["python", "bench.py", *(sys.argv[1:] if argv is None else argv)])
    with quiet_trainers():
        results = measure(args, command)
    print(table(results))
    print(f"results: {Path(args.json).resolve()}")
    return results


def cli() -> None:
    """`bench.py`, and the installed `<project>-bench`."""
    set_up_warnings()
    main()
