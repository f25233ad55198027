"""Baking helpers shared by the template's tests; bakes go under pytest's tmp dirs, never into the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parents[1]
CHOICES: dict[str, list[str]] = {
    k: v for k, v in json.loads((TEMPLATE / "cookiecutter.json").read_text()).items() if isinstance(v, list)
}
BIN = Path(sys.executable).parent  # ruff, mypy, cruft: installed beside this interpreter


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Minute-long tests first in each xdist worker's share, so that they overlap instead of queueing on one worker.

    `--dist worksteal` first hands each of the n workers one contiguous share of the collection, then rebalances
    only tests that have not started. The long ones go to the heads of those shares longest first, each to the share
    with the fewest minutes so far; a `slow` or `suite` marker's `minutes=` says how long its test takes (default 1).
    """

    def minutes(item: pytest.Item) -> float:
        marker = item.get_closest_marker("suite") or item.get_closest_marker("slow")
        return float(marker.kwargs.get("minutes", 1)) if marker else 0.0

    long = sorted((i for i in items if minutes(i)), key=minutes, reverse=True)
    short = [i for i in items if not minutes(i)]
    workers = getattr(config.option, "numprocesses", None) or 1
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for item in long:
        min(shares, key=lambda share: sum(map(minutes, share))).append(item)
    left = len(items)
    for w, share in enumerate(shares):
        size = left // (workers - w)  # what worksteal's first schedule sends to worker w
        left -= size
        share += [short.pop(0) for _ in range(max(0, size - len(share)))]
    items[:] = [item for share in shares for item in share] + short


def bake(output_dir: Path, **answers: str) -> Path:
    """`cookiecutter --no-input TEMPLATE key=value ...` into output_dir; returns the project folder."""
    return Path(cookiecutter(str(TEMPLATE), no_input=True, extra_context=answers, output_dir=str(output_dir)))


def run(
    *cmd: str | Path, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A tool in a bake, one thread, without the PYTEST_* variables of this (possibly xdist) run leaking into it;
    `env` adds to (or overrides) the inherited environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        **(env or {}),
    }
    return subprocess.run(
        [str(c) for c in cmd], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session", autouse=True)
def private_cookiecutter_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Cookiecutter and cruft write replay files and clones under ~; keep them in the test's tmp dir instead."""
    home = tmp_path_factory.mktemp("cookiecutter-home")
    config = home / "config.yaml"
    config.write_text(f"cookiecutters_dir: {home / 'templates'}\nreplay_dir: {home / 'replay'}\n")
    old = os.environ.get("COOKIECUTTER_CONFIG")
    os.environ["COOKIECUTTER_CONFIG"] = str(config)
    yield
    if old is None:
        del os.environ["COOKIECUTTER_CONFIG"]
    else:
        os.environ["COOKIECUTTER_CONFIG"] = old


@pytest.fixture(scope="session")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for every bake and xdist worker: torch and lightning are analysed once per Python version."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "mypy-cache"
