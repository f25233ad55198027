"""What a stopped or killed run must end with once `--resume last` has finished it: the uninterrupted run's step,
weights, optimizers and schedulers (its last checkpoint), every tensor its module holds at the end of fit on each
rank (an average of the weights, a queue, a count, kept in buffers or plain attributes), its summary metrics, its
validations and every value it logged, bit for bit. A failure names what differs, and after what."""

from __future__ import annotations

import csv
import re
from itertools import zip_longest
from pathlib import Path
from typing import Any

import torch

from lightning_gpu_engine.testing.script_runs import (
    Ended,
    changed_setting,
    first_difference,
    last_checkpoint,
    summary_metrics,
    validations,
)

# What the throughput monitor logs (perf/monitors.py): readings of a clock, and counts since its process started
MEASURED = re.compile(r"train/(time|batches|samples|lengths|flops|mfu|device/.*|.*_per_sec)")


def why_differs(saved: dict[str, Any]) -> str:
    """The likely cause of a difference, from the checkpoint that the run resumed from."""
    if (saved.get("exact_resume") or {}).get("train_loader") is None:
        return "the task's loader does not resume mid-epoch (use engine train_loader)"
    return "something random or stateful outside the checkpoint"


def logged_values(folder: Path, left_out: int | None = None) -> dict[str, list[tuple[str, str]]]:
    """Each value the CSV logger wrote under `folder`, by key: (step, value) in the order written; MEASURED, and
    the step `left_out`, left out."""
    values: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(folder.glob("logs/*/metrics.csv")):
        with open(path, newline="") as file:
            for row in csv.DictReader(file):
                step = row.get("step") or ""
                for key, value in row.items():
                    if value and key != "step" and not MEASURED.fullmatch(key) and step != str(left_out):
                        values.setdefault(key, []).append((step, value))
    return values


def held_tensors(dump: Path) -> dict[int, dict[str, torch.Tensor]]:
    """Each watched rank's tensors at the end of fit (watched.module_tensors), by rank."""
    ranks = sorted(dump.glob("rank*.pt"))
    return {int(p.stem.removeprefix("rank")): torch.load(p, weights_only=True)["tensors"] for p in ranks}


def assert_resumed_like(whole: Ended, resumed: Ended, how: str, why: str, unlogged: int | None = None) -> None:
    """`resumed` ends as `whole` did, after `how` (the stop, in words); `why`: the likely cause of a difference;
    `unlogged`: the logger's step whose values a hard kill lost (Lightning writes them after that step's save)."""
    want, got = last_checkpoint(whole.folder), last_checkpoint(resumed.folder)
    steps = (got["global_step"], want["global_step"])
    assert steps[0] == steps[1], f"resume: step {steps[0]} after {how}, not {steps[1]}"
    changed = changed_setting(want["optimizer_states"], got["optimizer_states"])
    assert changed is None, (
        f"resume: {changed} after {how}: the checkpoint load changed a value it saved. That is the engine's doing (a "
        "resume must give a module's optimizers back as they were saved), not the task's: report it"
    )
    parameters = set(torch.load(whole.dump / "rank0.pt", weights_only=True)["parameters"])
    for name, value in want["state_dict"].items():
        same = name in got["state_dict"] and torch.equal(got["state_dict"][name], value)
        assert same, f"resume: {'weight' if name in parameters else 'buffer'} {name} differs after {how}: {why}"
    for part in ("optimizer_states", "lr_schedulers"):
        where = first_difference(want[part], got[part])
        assert where is None, f"resume: {part}{where} differs after {how}: {why}"
    held, have = held_tensors(whole.dump), held_tensors(resumed.dump)
    assert sorted(have) == sorted(held), f"resume: ranks {sorted(have)} ended fit after {how}, not {sorted(held)}"
    for rank, tensors in held.items():
        where = first_difference(tensors, have[rank])
        assert where is None, f"resume: the module's tensor {where} differs on rank {rank} after {how}: {why}"
    metrics = (summary_metrics(resumed.stdout), summary_metrics(whole.stdout))
    assert metrics[0] == metrics[1], f"resume: the metrics after {how} are {metrics[0]}, not {metrics[1]}: {why}"
    runs = (validations(resumed.folder), validations(whole.folder))
    assert runs[0] == runs[1], f"resume: validations {runs[0]} after {how}, not {runs[1]}"
    logged, wanted = logged_values(resumed.folder, unlogged), logged_values(whole.folder, unlogged)
    for key in sorted(set(logged) | set(wanted)):
        pairs = zip_longest(wanted.get(key, []), logged.get(key, []))
        first = next(((w, h) for w, h in pairs if w != h), None)
        assert first is None, f"resume: {key} logged {_said(first[1])}, not {_said(first[0])}, after {how}: {why}"


def _said(logged: tuple[str, str] | None) -> str:
    return "nothing more" if logged is None else f"{logged[1]} at the logger's step {logged[0]}"
