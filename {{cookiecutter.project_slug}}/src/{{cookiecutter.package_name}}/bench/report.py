"""bench.py's output: the table it prints and the JSON file it keeps up to date."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from ..engine.files import write_text

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
    naive = next((r["images_per_s"] for r in results["settings"] if r["name"] == "fp32"), None)
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
        label = row["name"] + (" (default)" if row.get("default") else "")
        speedup = "-" if naive is None else f"{row['images_per_s'] / naive:.2f}"
        memory = "n/a" if row["peak_memory_gib"] is None else f"{row['peak_memory_gib']:.2f}"
        mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
        windows = f"{spread(row['windows']):.0%}"  # of the timed windows: the row's own noise
        lines.append(
            f"{label:<26}{row['images_per_s']:>10.1f}{windows:>8}{speedup:>8}{row['step_ms']:>9.1f}"
            f"{row['startup_s']:>12.1f}{memory:>10}{mfu:>7}"
        )
    if results["plain"]:
        lines.append(ratio_line(results))
    synthetic = next((r["images_per_s"] for r in results["settings"] if r.get("default")), None)
    for row in results["folder"]:
        versus = "" if synthetic is None else f" = {row['images_per_s'] / synthetic:.2f}x synthetic"
        lines.append(f"{row['name']:<40}{row['images_per_s']:>10.1f} img/s{versus}")
    for row in results.get("predict", []):
        lines.append(f"{row['name']:<40}{row['images_per_s']:>10.1f} img/s")
    if len(results.get("predict", [])) == 2:
        lightning_path, plain = (row["images_per_s"] for row in results["predict"])
        lines.append(f"Lightning / plain PyTorch inference throughput: {lightning_path / plain:.3f}")
    for row in results["loader"]:
        pinned = "pinned" if row["pin_memory"] else "pageable"
        lines.append(
            f"loader {row['data']:<18} {row['workers']:>2} workers, {pinned:<9}{row['samples_per_s']:>10.1f} samples/s"
        )
    return "\n".join(lines)


def write_json(path: Path, results: dict[str, Any]) -> None:
    """Written to a partial file and renamed over the old one: a kill mid-write leaves the previous rows whole."""
    write_text(path, json.dumps(results, indent=2) + "\n")
