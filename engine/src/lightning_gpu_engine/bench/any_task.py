"""`bench.py --task MODULE`: any Task's training speed for each precision x compile setting this device has, built
through the Task as train.py builds it, measured by the harness's Trainer and clock.

The DataModule's first few training batches are put on the device before the clock starts and cycled, so the loader
is not measured (bench.py's image rows measure loaders); what the DataModule does after the copy
(`on_after_batch_transfer`, e.g. device-side augmentation) is, as it runs in every training step.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import itertools
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device

from lightning_gpu_engine import (
    Config,
    ConfigError,
    Hardware,
    OneLineParser,
    Task,
    batch_flops,
    check_module,
    fail,
    parse_run,
)

from .harness import Setting, Spec, peak_flops, prepare, quiet_trainers, time_fit
from .report import check_json, repeat_lines, task_header, task_results, task_row, write_json

# peek_task: the bench.py of a project made before it moved to task_module calls any_task.peek_task
from .task_module import load_task, peek_task  # noqa: F401

USAGE = """Training throughput of your own task (its TASK = Task(...)) for each precision x compile setting.

    python bench.py --task my_task                       # a module here, a dotted path, or a .py file
    python bench.py --task my_task --batch-size 256 --hidden 128 --only fp32,bf16 --repeat 3

Flags after bench.py's own are your training flags (the engine's and the task's, as `python my_task.py` takes them),
the same in every row; bench.py sets the precision and compile of each row, on one device. Each row gives samples/s
(items/s too where the Task counts items per batch: tokens), step time, start-up, and MFU where the device's dense
peak is known (CUDA GPUs in the engine's perf/peaks.py, or --peak-tflops). Every row is printed and saved to --json as
soon as it is measured, with the device, versions and command.
"""
STEPS = {"cuda": (20, 100), "cpu": (3, 10)}  # (warm-up, timed): a CPU row in seconds, a GPU row past its autotuning


def parse(argv: list[str], prog: str = "bench.py") -> tuple[argparse.Namespace, list[str]]:
    parser = OneLineParser(prog=prog, description=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", metavar="MODULE", required=True, help="the module or .py file whose TASK is timed")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default: 20 on CUDA, 3 elsewhere)")
    parser.add_argument("--steps", type=int, help="timed steps, in windows of steps/5 (default: 100 CUDA, 10 else)")
    parser.add_argument("--only", help="comma-separated setting names (the table's first column); default: all")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure every setting in turn this many times: ratios from one round, a drifting machine slows all",
    )
    parser.add_argument("--peak-tflops", type=float, help="one device's dense bf16/fp16 peak, for MFU on other GPUs")
    parser.add_argument("--json", default="bench-results.json", help="where the rows go (default: %(default)s)")
    args, rest = parser.parse_known_args(argv)
    for name in ("warmup", "steps", "repeat"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            fail(f"--{name}: must be {'0 or more' if name == 'warmup' else 'a positive integer'}, got {value}")
    check_json(args.json)
    return args, rest


def one_device(cfg: Config) -> Config:
    """Every row on one device, the rest of the user's options kept."""
    return dataclasses.replace(cfg, devices="1", num_nodes=1, strategy="auto", auto_batch_size=False)


def matrix(task: Task, cfg: Config) -> tuple[list[Setting], Setting, str]:
    """Each precision this device runs, eager and compiled; the setting train.py would pick (added if not among
    them); and the accelerator."""
    try:
        hw = _resolve(one_device(cfg), task)
    except ConfigError as err:  # a bake's 16-mixed on a CPU: mark what --precision auto gives
        if err.option != "precision":
            raise
        hw = _resolve(dataclasses.replace(one_device(cfg), precision="auto"), task)
    cuda = hw.accelerator == "cuda"
    layout = bool(hw.channels_last)
    if cuda:
        halves = ("bf16-mixed", "16-mixed") if torch.cuda.is_bf16_supported() else ("16-mixed",)
        precisions: tuple[str, ...] = ("32-true", *halves)
    else:  # bf16 autocast runs on any CPU; it is fast on those with AMX or AVX512-BF16
        precisions = ("32-true", "bf16-mixed")
    settings = [Setting(p, cfg.tf32 and cuda, layout, c) for p in precisions for c in (False, True)]
    default = Setting(hw.precision, cfg.tf32 and cuda, layout, hw.compile)
    return settings + [default] * (default not in settings), default, hw.accelerator


def _resolve(cfg: Config, task: Task) -> Hardware:
    return prepare(cfg, fsdp2=task.fsdp2, channels_last=task.channels_last, compile_off=task.compile_off)


def device_batches(data: Any, task: Task, device: str, count: int) -> list[Any]:
    """The first `count` full training batches, on the device (a smaller last batch would change the count)."""
    data.prepare_data()
    data.setup("fit")
    batches: list[Any] = []
    for batch in itertools.islice(data.train_dataloader(), count + 1):
        if batches and task.batch_size_fn(batch) != task.batch_size_fn(batches[0]):
            break
        batches.append(move_data_to_device(batch, device))
    if not batches:
        fail("--task: its train_dataloader gave no batch; give it more samples or a smaller --batch-size")
    return batches[:count]


class Cycled:
    """`length` batches cycled from a few already on the device."""

    def __init__(self, batches: list[Any], length: int) -> None:
        self.batches, self.length = batches, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Any:
        return (self.batches[i % len(self.batches)] for i in range(self.length))


def measure_row(task: Task, cfg: Config, opts: Any, setting: Setting, warmup: int, steps: int, out: Path) -> dict:
    """One setting, built as train.py builds it (hardware, the task's device choices, data, model) and timed."""
    overrides: dict[str, Any] = {"precision": setting.precision, "compile": setting.compile, "tf32": setting.tf32}
    overrides |= {"channels_last": setting.channels_last} if task.channels_last else {}
    cfg = dataclasses.replace(
        one_device(cfg), **overrides, max_epochs=1, max_steps=warmup + steps, logger="csv", output_dir=str(out)
    )
    hw = _resolve(cfg, task)
    if task.resolve is not None:
        hw = dataclasses.replace(hw, choices={**hw.choices, **task.resolve(cfg, opts, hw)})
    data = task.build_data(cfg, opts, hw)
    model = task.build(cfg, opts, hw, data)  # as train.py builds it: its layout, its networks
    hw = check_module(task, model, cfg, hw)[0]
    batches = device_batches(data, task, hw.accelerator, 4)
    # The Trainer asks the instance for its loader: these batches, and the DataModule's hooks after the copy
    data.train_dataloader = lambda: Cycled(batches, warmup + steps)  # type: ignore[method-assign]
    samples = task.batch_size_fn(batches[0])
    spec = Spec(device=hw.accelerator, batch_size=samples, warmup=warmup, steps=steps)
    with contextlib.redirect_stdout(io.StringIO()):  # the table, not the run's own lines (epoch done, notes)
        timing = time_fit(spec, cfg, hw, model, data, task)
    # length_fn counts a batch's items, batch_size_fn its samples: items/s from samples/s
    items = task.length_fn(batches[0]) / samples * timing.samples_per_s if task.length_fn else None
    flops = batch_flops(model, data.hparams.get("batch_size"))  # what the throughput monitor counts, for MFU
    return {
        "name": setting.name,
        **dataclasses.asdict(setting),
        **dataclasses.asdict(timing),
        "batch_size": samples,
        "items_per_s": items,
        "flops_per_batch": flops,
    }


def main(argv: list[str] | None = None, prog: str = "bench.py") -> dict[str, Any]:
    """bench.py's body with --task: a table printed row by row, the rows saved to --json as they come. `prog`: the
    command as typed (`bench.py`, `python -m lightning_gpu_engine bench`), for its usage and the saved command."""
    argv = sys.argv[1:] if argv is None else argv
    args, rest = parse(argv, prog)
    found = load_task(args.task)
    task, json_path = found.task, Path(args.json)
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:
        cfg, opts = parse_run([*rest, f"--output-dir={workdir}/check"], task, prog=prog)
        try:
            settings, default, accelerator = matrix(task, cfg)
        except ConfigError as err:
            fail(str(err))
        settings = select(settings, args.only)
        warmup, steps = STEPS["cuda" if accelerator == "cuda" else "cpu"]
        warmup, steps = (warmup if args.warmup is None else args.warmup), args.steps or steps
        command = shlex.join(["python", *prog.removeprefix("python ").split(), *argv])
        results = task_results(task, command, accelerator, warmup, steps)
        write_json(json_path, results)
        print(task_header(results), flush=True)
        with quiet_trainers():
            for round_, setting in itertools.product(range(args.repeat), settings):
                out = Path(workdir, f"{setting.name}-{round_}")
                try:
                    row = measure_row(task, cfg, opts, setting, warmup, steps, out)
                except ConfigError as err:
                    fail(str(err))
                peak = peak_flops(accelerator, setting.precision, setting.tf32, args.peak_tflops)
                flops = row["flops_per_batch"]  # 0: the module could not count them (no example_input)
                mfu = flops * row["samples_per_s"] / row["batch_size"] / peak if peak and flops else None
                results["settings"].append(row | {"mfu": mfu, "default": setting == default, "round": round_})
                write_json(json_path, results)
                print(task_row(results, results["settings"][-1]), flush=True)
    results["finished"] = True
    write_json(json_path, results)
    for line in repeat_lines(results["settings"]):
        print(line)
    print(f"results: {json_path.resolve()}")
    return results


def select(settings: list[Setting], only: str | None) -> list[Setting]:
    if only is None:
        return settings
    names = [name.strip() for name in only.split(",") if name.strip()]
    for name in names:
        if name not in [s.name for s in settings]:
            fail(f"--only: {name!r} is not one of: {', '.join(s.name for s in settings)}")
    return [s for s in settings if s.name in names]
