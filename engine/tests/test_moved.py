"""`alias_engine`: a project's `<package>.engine` names this package at every depth, with the modules that moved at
their new places, as docs/layout.md's "What moved" table says."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_gpu_engine.moved import MOVED

from .conftest import guide

# a project's src/team/engine.py, as the template bakes it (less its docstring and its names for type checkers)
ENGINE_PY = "import lightning_gpu_engine as _engine\n_engine.alias_engine(__name__)\n"


def test_the_guides_table_is_the_one_the_alias_follows() -> None:
    row = r"^\| `<package>\.engine\.(\w+)` \| `lightning_gpu_engine\.([\w.]+)` \|$"
    rows = re.findall(row, guide("layout"), flags=re.M)
    assert dict(rows) == MOVED


@pytest.mark.parametrize("new", sorted(set(MOVED.values())))
def test_every_new_place_is_a_module_of_the_engine(new: str) -> None:
    importlib.import_module(f"lightning_gpu_engine.{new}")


def test_a_deep_import_through_the_alias_is_the_engines_own_module_and_an_unknown_one_is_not_found(
    tmp_path: Path,
) -> None:
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "__init__.py").write_text("")
    (tmp_path / "team" / "engine.py").write_text(ENGINE_PY)
    probe = """
import importlib, sys
import lightning_gpu_engine.perf.hardware as hardware
from lightning_gpu_engine.checkpoint.files import OutputBusyError
from team.engine.hardware import Hardware
from team.engine.checkpoint.files import OutputBusyError as Busy
import team.engine.config
print(Hardware is hardware.Hardware, Busy is OutputBusyError,
      sys.modules["team.engine.hardware"] is hardware,
      team.engine.config is sys.modules["lightning_gpu_engine.config.options"])
try:
    import team.engine.nothing_here
except ModuleNotFoundError as err:
    print("not found:", err.name)
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["True True True True", "not found: team.engine.nothing_here"]


def test_a_teams_change_to_the_old_engine_that_the_update_left_is_named_at_each_start(tmp_path: Path) -> None:
    (tmp_path / "team" / "engine").mkdir(parents=True)
    (tmp_path / "team" / "__init__.py").write_text("")
    (tmp_path / "team" / "engine.py").write_text(ENGINE_PY)
    patched = tmp_path / "team" / "engine" / "hardware.py"
    patched.write_text("PATCHED = True  # the team's fix to the copied engine\n")
    probe = "import team.engine.hardware as h; print(hasattr(h, 'PATCHED'), h.__name__)"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "lightning_gpu_engine.perf.hardware"]
    assert done.stderr.splitlines() == [
        f"warning: {patched} no longer runs: team.engine.hardware is lightning_gpu_engine.perf.hardware now; port "
        "your change to that module (or eject the engine: python -m lightning_gpu_engine eject), then delete this file"
    ]
