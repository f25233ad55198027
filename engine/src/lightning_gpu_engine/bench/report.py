"""bench.py's output: the table it prints and the JSON file it keeps up to date."""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning
import torch

from lightning_gpu_engine import ConfigError, Task, check_output, fail, write_text

# Above this spread between interleaved rounds, a ratio says more about the machine's load than about the code.
NOISY = 0.05


def spread(values: list[float]) -> float:
    """(max - min) / median: how far apart repeated measurements of one thing landed."""
    return (max(values) - min(values)) / statistics.median(values) if values else 0.0


def compare(rounds: list[tuple[float, float]]) -> dict[str, Any]:
    """Lightning against plain PyTorch from interleaved (lightning, plain) img/s rounds: the median ratio, each
    round's, and whether their spread makes the median meaningless."""
    ratios = [lightning / plain for lightning, plain in rounds]
    return {
        "lightning_over_plain": statistics.median(ratios),
        "lightning_over_plain_rounds": ratios,
        "lightning_over_plain_noisy": len(ratios) < 2 or spread(ratios) > NOISY,
    }


def ratio_line(results: dict[str, Any]) -> str:
    ratios = results["lightning_over_plain_rounds"]
    line = f"Lightning / plain PyTorch throughput: {results['lightning_over_plain']:.3f}"
    if len(ratios) < 2:
        return line + " (1 round: no spread to judge it by; --rounds 3 or more)"
    line += f" (median of {len(ratios)} interleaved rounds, {min(ratios):.3f} to {max(ratios):.3f}"
    if results["lightning_over_plain_noisy"]:
        line += f"; spread {spread(ratios):.0%} > {NOISY:.0%}: too noisy to mean anything, rerun on an idle machine"
    return line + ")"


def table(results: dict[str, Any]) -> str:
    naive = {r.get("round", 0): r["samples_per_s"] for r in results["settings"] if r["name"] == "fp32"}
    lines = [
        f"{results['device']} | torch {results['torch']} | lightning {results['lightning']} | {results['model']} "
        f"{results['image_size']} px, batch {results['batch_size']} | {results['warmup']} warm-up + "
        f"{results['steps']} timed steps"
    ]
    if results["settings"]:
        lines.append(
            f"{'setting':<26}{'img/s':>10}{'spread':>8}{'x fp32':>8}{'step ms':>9}{'start-up s':>12}{'peak GiB':>10}"
            f"{'MFU':>7}"
        )
    for row in [*results["settings"], *([results["plain"]] if results["plain"] else [])]:
        again = f" #{row['round'] + 1}" if row.get("round") else ""  # a --repeat round after the first
        label = row["name"] + (" (default)" if row.get("default") else "") + again
        base = naive.get(row.get("round", 0))  # the plain loop's row: the first round's
        speedup = "-" if base is None else f"{row['samples_per_s'] / base:.2f}"
        memory = "n/a" if row["peak_memory_gib"] is None else f"{row['peak_memory_gib']:.2f}"
        mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
        windows = f"{spread(row['windows']):.0%}"  # of the timed windows: the row's own noise
        lines.append(
            f"{label:<26}{row['samples_per_s']:>10.1f}{windows:>8}{speedup:>8}{row['step_ms']:>9.1f}"
            f"{row['startup_s']:>12.1f}{memory:>10}{mfu:>7}"
        )
    if results["plain"]:
        lines.append(ratio_line(results))
    synthetic = next((r["samples_per_s"] for r in results["settings"] if r.get("default")), None)
    for row in results["folder"]:
        versus = "" if synthetic is None else f" = {row['samples_per_s'] / synthetic:.2f}x synthetic"
        lines.append(f"{row['name']:<40}{row['samples_per_s']:>10.1f} img/s{versus}")
    for row in results.get("predict", []):
        lines.append(f"{row['name']:<40}{row['samples_per_s']:>10.1f} img/s")
    if len(results.get("predict", [])) == 2:
        lightning_path, plain = (row["samples_per_s"] for row in results["predict"])
        lines.append(f"Lightning / plain PyTorch inference throughput: {lightning_path / plain:.3f}")
    for row in results["loader"]:
        pinned = "pinned" if row["pin_memory"] else "pageable"
        lines.append(
            f"loader {row['data']:<18} {row['workers']:>2} workers, {pinned:<9}{row['samples_per_s']:>10.1f} samples/s"
        )
    return "\n".join(lines)


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's model and the threads it has: what a row's numbers belong to."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    models = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return f"{models[0] if models else 'CPU'} ({os.cpu_count()} threads)"


def figures_file(out: Path, argv: list[str]) -> Callable[[str], None]:
    """`say`, which prints a line and appends it to `out` at once (a run cut short keeps what it measured), after a
    header: when, the command, the device and the versions."""

    def say(line: str) -> None:
        print(line, flush=True)
        with out.open("a") as fh:
            fh.write(line + "\n")

    device = device_name("cuda" if torch.cuda.is_available() else "cpu")
    say(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: python {shlex.join(argv)}")
    say(f"# device: {device}, {len(os.sched_getaffinity(0))} usable cores")
    say(f"# torch {torch.__version__}, lightning {lightning.__version__}, python {platform.python_version()}")
    return say


def task_results(task: Task, command: str, accelerator: str, warmup: int, steps: int) -> dict[str, Any]:
    """What `bench.py --task` saves before its first row: the machine, the versions, the command."""
    return {
        "command": command,
        "task": task.name,
        "unit": task.unit,
        "items": task.length_fn is not None,
        "device": device_name(accelerator),
        "accelerator": accelerator,
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "cuda": torch.version.cuda if accelerator == "cuda" else None,
        "threads": torch.get_num_threads(),
        "warmup": warmup,
        "steps": steps,
        "finished": False,
        "settings": [],
    }


def task_header(results: dict[str, Any]) -> str:
    items = f"{'items/s':>12}" if results["items"] else ""
    return (
        f"{results['device']} | {results['threads']} torch threads | torch {results['torch']} | lightning "
        f"{results['lightning']} | {results['task']} | {results['warmup']} warm-up + {results['steps']} timed steps\n"
        f"{'setting':<26}{'samples/s':>12}{items}{'spread':>8}{'x fp32':>8}{'step ms':>9}{'CPU ms':>9}"
        f"{'start-up s':>12}{'peak GiB':>10}{'MFU':>7}"
    )


def task_row(results: dict[str, Any], row: dict[str, Any]) -> str:
    """One measured row; `x fp32` against the fp32 row of the same round, when there is one."""
    naive = next((r for r in results["settings"] if r["name"] == "fp32" and r["round"] == row["round"]), None)
    speedup = "-" if naive is None else f"{row['samples_per_s'] / naive['samples_per_s']:.2f}"
    items = f"{row['items_per_s']:>12.0f}" if results["items"] else ""
    memory = "n/a" if row["peak_memory_gib"] is None else f"{row['peak_memory_gib']:.2f}"
    mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
    label = row["name"] + (" (default)" if row["default"] else "") + (f" #{row['round'] + 1}" if row["round"] else "")
    return (
        f"{label:<26}{row['samples_per_s']:>12.1f}{items}{spread(row['windows']):>8.0%}{speedup:>8}"
        f"{row['step_ms']:>9.1f}{row['cpu_step_ms']:>9.1f}{row['startup_s']:>12.1f}{memory:>10}{mfu:>7}"
    )


def repeat_lines(rows: list[dict[str, Any]], baseline: str = "fp32") -> list[str]:
    """With settings measured in turn several times: each setting's speed over the baseline's of the same round, by
    wall clock and by process CPU time per step, the median and every round's. A machine whose speed drifts slows a
    whole round alike; one shared with other programs scatters wall-clock ratios, far less CPU-time ones."""
    base = {r["round"]: r for r in rows if r["name"] == baseline}
    ratios: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r["name"] != baseline and r["round"] in base:
            b = base[r["round"]]
            ratios[r["name"]].append((r["samples_per_s"] / b["samples_per_s"], b["cpu_step_ms"] / r["cpu_step_ms"]))
    lines = []
    for name, pairs in ratios.items():
        if len(pairs) < 2:
            continue
        for i, clock in enumerate(("wall clock", "CPU time")):
            values = [pair[i] for pair in pairs]
            lines.append(
                f"{name}: {statistics.median(values):.3f}x {baseline} by {clock} (median of {len(values)} interleaved "
                f"rounds: {', '.join(f'{v:.3f}' for v in values)}; spread {spread(values):.0%})"
            )
    return lines


def check_json(path: str) -> None:
    """--json can be written (files.check_output): told in one line before minutes of measuring, not after."""
    try:
        check_output(path, "json")
    except ConfigError as err:
        fail(str(err))


def write_json(path: Path, results: dict[str, Any]) -> None:
    """Written to a partial file and renamed over the old one: a kill mid-write leaves the previous rows whole."""
    try:
        write_text(path, json.dumps(results, indent=2) + "\n", option="json")
    except ConfigError as err:  # the place changed since check_json (a full disk): the rows so far are on screen
        fail(str(err), code=1)
