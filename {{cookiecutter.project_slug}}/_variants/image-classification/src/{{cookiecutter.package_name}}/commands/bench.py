"""Training throughput of each speed setting on this machine, and what Lightning costs against a plain PyTorch loop.

    python bench.py                                # CUDA: ResNet-50 at 224 px; CPU: a tiny ResNet-18 configuration
    python bench.py --only bf16+cl+compile,loader  # some settings only; the table's first column has the names
    python bench.py --task my_task                 # your own task's rows instead (its TASK): --task --help says more

`folder` trains the default setting end to end from photo-like JPEGs (500x375, ~100 KB) through the real loader,
decoded by the workers and, with CUDA, on the GPU; `loader` measures the loaders alone. One table is printed; the
numbers, the device, the versions and the command go to --json, each row as soon as it is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_gpu_engine import ConfigError, OneLineParser, check_output, fail, set_up_warnings
from lightning_gpu_engine.bench import check_task, peek_task

if TYPE_CHECKING:  # torch, Lightning and the task's bench load once the flags are read
    from lightning_gpu_engine.bench import Setting, Timing

    from {{ cookiecutter.package_name }}.tasks.image_classification.bench import (
        ImageSpec,
    )

# Per device: the configuration the GPU targets are quoted for, or one that a laptop CPU runs in about a minute with
# rounds that agree (their spread was under 2% on an idle 2-core CPU; 6 steps gave 17%).
DEFAULTS = {
    "cuda": {"model": "resnet50", "image_size": 224, "batch_size": 256, "warmup": 20, "steps": 100},
    "cpu": {"model": "resnet18", "image_size": 32, "batch_size": 16, "warmup": 5, "steps": 30},
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="bench.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", metavar="MODULE", help="bench your own task (a module or .py file with TASK) instead")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="auto: CUDA when visible")
    parser.add_argument("--model", help="torchvision model (default: resnet50 on CUDA, resnet18 on CPU)")
    parser.add_argument("--image-size", type=int, help="default: 224 on CUDA, 32 on CPU")
    parser.add_argument("--batch-size", type=int, help="default: 256 on CUDA, 16 on CPU")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default: 20 on CUDA, 5 on CPU)")
    parser.add_argument("--steps", type=int, help="timed steps, in windows of steps/5 (default: 100 CUDA, 30 CPU)")
    parser.add_argument("--only", help="comma-separated setting names, 'folder', 'loader'; default: everything")
    parser.add_argument("--compile", action="store_true", help="CPU: add compiled settings (always there on CUDA)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="Lightning and plain PyTorch measured in turn this many times (%(default)s)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure every setting in turn this many times: ratios from one round, a drifting machine slows all",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        help="one device's dense bf16/fp16 peak, for MFU on a GPU missing from lightning_gpu_engine/perf/peaks.py",
    )
    parser.add_argument("--json", default="bench-results.json", help="where the results go (default: %(default)s)")
    args = parser.parse_args(argv)
    for key in ("image_size", "batch_size", "steps", "rounds", "repeat"):
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


def matrix(device: str, with_compile: bool) -> list[Setting]:
    """The naive baseline first, then one knob at a time. TF32 and fp16 are CUDA features; CPU runs without them."""
    import torch
    from lightning_gpu_engine.bench import Setting

    if device == "cpu":
        settings = [Setting(p, False, cl, False) for p in ("32-true", "bf16-mixed") for cl in (False, True)]
        return settings + ([Setting(p, False, True, True) for p in ("32-true", "bf16-mixed")] if with_compile else [])
    settings = [Setting("32-true", False, False, False), Setting("32-true", True, False, False)]
    for half in ("bf16-mixed", "16-mixed") if torch.cuda.is_bf16_supported() else ("16-mixed",):
        settings += [
            Setting(half, True, False, False),
            Setting(half, True, True, False),
            Setting(half, True, True, True),
        ]
    return settings


def default_setting(spec: ImageSpec) -> Setting:
    """What `python train.py` resolves to on this device with the same model and sizes."""
    from lightning_gpu_engine import Config, resolve_hardware
    from lightning_gpu_engine.bench import Setting

    cfg = Config(accelerator=spec.device, devices="1", strategy="auto")
    try:
        hw = resolve_hardware(cfg, channels_last=True)
    except ConfigError:  # a project generated with 16-mixed, on a CPU: compare with what --precision auto gives
        hw = resolve_hardware(dataclasses.replace(cfg, precision="auto"), channels_last=True)
    return Setting(hw.precision, cfg.tf32 and spec.device == "cuda", bool(hw.channels_last), hw.compile)


def select(settings: list[Setting], only: str | None) -> tuple[list[Setting], set[str]]:
    """The settings asked for, and which of the real-data parts ('folder', 'loader', 'predict')."""
    parts = {"folder", "loader", "predict"}
    if only is None:
        return settings, parts
    names = [name.strip() for name in only.split(",") if name.strip()]
    valid = [s.name for s in settings] + sorted(parts)
    for name in names:
        if name not in valid:
            fail(f"--only: {name!r} is not one of: {', '.join(valid)}")
    return [s for s in settings if s.name in names], parts & set(names)


def measure(
    args: argparse.Namespace, spec: ImageSpec, command: str, save: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Every row is handed to `save` as soon as it is measured: a crash late in the run keeps the earlier rows."""
    import lightning
    import torch
    from lightning_gpu_engine import cpus_per_device
    from lightning_gpu_engine.bench import device_name, interleaved_rounds, peak_flops

    from {{ cookiecutter.package_name }}.tasks.image_classification.bench import (
        flops_per_batch,
        loader_rows,
        run_lightning,
        run_plain,
        run_plain_predict,
        run_predict,
    )
    from {{ cookiecutter.package_name }}.tasks.image_classification.decoding import (
        torchcodec_available,
    )
    from {{ cookiecutter.package_name }}.tasks.image_classification.sources import (
        write_photos,
    )

    default = default_setting(spec)
    settings = matrix(spec.device, args.compile or spec.device == "cuda")
    settings, parts = select(settings + [default] * (default not in settings), args.only)
    try:
        flops = flops_per_batch(spec)
    except ConfigError as err:  # an unknown --model
        fail(str(err))
    results: dict[str, Any] = {
        "command": command,
        **dataclasses.asdict(spec),
        "device": device_name(spec.device),
        "accelerator": spec.device,
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "cuda": torch.version.cuda if spec.device == "cuda" else None,
        "flops_per_batch": flops,
        "finished": False,
        "settings": [],
        "plain": None,
        "lightning_over_plain": None,
        "lightning_over_plain_rounds": [],
        "folder": [],
        "loader": [],
        "predict": [],
    }
    save(results)
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:

        def row(run: Callable[..., Timing], setting: Setting, name: str, **options: Any) -> dict[str, Any]:
            timing = run(spec, setting, Path(workdir, name.replace("/", "-")), **options)
            peak = peak_flops(spec.device, setting.precision, setting.tf32, args.peak_tflops)
            mfu = flops * timing.samples_per_s / spec.batch_size / peak if peak else None
            return {"name": name, **dataclasses.asdict(setting), **dataclasses.asdict(timing), "mfu": mfu}

        for round_, setting in ((r, s) for r in range(args.repeat) for s in settings):  # settings in turn
            name = setting.name + (f" #{round_ + 1}" if round_ else "")
            measured = row(run_lightning, setting, name) | {"default": setting == default, "round": round_}
            results["settings"].append(measured | {"name": setting.name})
            save(results)
            if setting == default and round_ == 0:
                results["plain"] = row(run_plain, setting, f"plain PyTorch, {setting.name}")
                first = (results["settings"][-1]["samples_per_s"], results["plain"]["samples_per_s"])
                runs = (run_lightning, run_plain)
                interleaved_rounds(
                    results, first, args.rounds, runs, spec, setting, Path(workdir), lambda: save(results)
                )
        cpus = cpus_per_device(1)
        if "folder" in parts:
            photos = Path(workdir, "photos")
            write_photos(photos, spec.batch_size * (spec.warmup + spec.steps))
            gpu = spec.device == "cuda" and torchcodec_available()
            for decode in ("cpu", "gpu") if gpu else ("cpu",):
                name = f"{default.name}, folder JPEGs, {decode} decode"
                results["folder"].append(row(run_lightning, default, name, folder=photos, decode=decode))
                save(results)
        if "predict" in parts:  # predict.py's path and a plain inference_mode loop, on the same JPEGs
            photos = Path(workdir, "predict-photos")
            write_photos(photos, spec.batch_size * (spec.warmup + spec.steps))
            for run, name in ((run_predict, "predict.py path"), (run_plain_predict, "plain inference_mode loop")):
                results["predict"].append(row(run, default, f"{name}, {default.name}", folder=photos) | {"mfu": None})
                save(results)
        if "loader" in parts:
            device = torch.device(spec.device)

            def add(loader_row: dict[str, object]) -> None:
                results["loader"].append(loader_row)
                save(results)

            loader_rows(device, spec, cpus, Path(workdir), on_row=add)
    results["finished"] = True
    save(results)
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    task = peek_task(argv)
    if task is not None:  # a team's own task: rows of its own, built through its TASK
        check_task(task)
        from lightning_gpu_engine.bench import any_task

        return any_task.main(argv)
    args = parse_args(argv)
    from lightning_gpu_engine.bench import quiet_trainers, repeat_lines, table, write_json

    from {{ cookiecutter.package_name }}.tasks.image_classification.bench import (
        ImageSpec,
    )

    spec = ImageSpec(
        device=args.device,
        batch_size=args.batch_size,
        warmup=args.warmup,
        steps=args.steps,
        model=args.model,
        image_size=args.image_size,
    )
    command = shlex.join(["python", "bench.py", *(sys.argv[1:] if argv is None else argv)])
    with quiet_trainers():
        results = measure(args, spec, command, save=lambda results: write_json(Path(args.json), results))
    print(table(results))
    for line in repeat_lines(results["settings"]):
        print(line)
    print(f"results: {Path(args.json).resolve()}")
    return results


def cli() -> None:
    """`bench.py`, and the installed `<project>-bench`."""
    set_up_warnings()
    main()
