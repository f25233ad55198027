"""`alias_engine`: a project's `<package>.engine` names this package at every depth, with the modules that moved at
their new places, as the "What moved" table of engine/UPGRADING.md says."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_gpu_engine.moved import MOVED, RENAMED, renamed

# a project's src/team/engine.py, as the template bakes it (less its docstring and its names for type checkers)
ENGINE_PY = "import lightning_gpu_engine as _engine\n_engine.alias_engine(__name__)\n"
UPGRADING = Path(__file__).resolve().parents[1] / "UPGRADING.md"  # maintainers' tables, beside CHANGELOG.md


def test_the_guides_table_is_the_one_the_alias_follows() -> None:
    row = r"^\| `<package>\.engine\.(\w+)` \| `lightning_gpu_engine\.([\w.]+)` \|$"
    rows = re.findall(row, UPGRADING.read_text(), flags=re.M)
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
from lightning_gpu_engine.tools.files import OutputBusyError
from team.engine.hardware import Hardware
from team.engine.tools.files import OutputBusyError as Busy
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


@pytest.mark.parametrize("old", [*sorted(RENAMED), "build.trainer"])
def test_a_12_path_of_a_module_that_moved_in_13_is_its_new_module_with_a_deprecation_line(old: str) -> None:
    # a fresh interpreter: in this one, an earlier test may have imported the old path already, and the line is once
    probe = (
        "import importlib, warnings\n"
        "warnings.simplefilter('always')\n"
        f"new = importlib.import_module('lightning_gpu_engine.{renamed(old)}')\n"
        "with warnings.catch_warnings(record=True) as said:\n"
        f"    old = importlib.import_module('lightning_gpu_engine.{old}')\n"
        "print(old is new, [str(w.message) for w in said if w.category is DeprecationWarning])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    same, said = done.stdout.strip().split(" ", 1)
    assert same == "True", done.stdout
    assert f"lightning_gpu_engine.{old} is lightning_gpu_engine.{renamed(old)} since lightning-gpu-engine 1.3" in said


def test_a_12_path_through_a_projects_old_engine_name_reaches_the_same_module(tmp_path: Path) -> None:
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "__init__.py").write_text("")
    (tmp_path / "team" / "engine.py").write_text(ENGINE_PY)
    probe = (
        "import importlib\n"
        "old = importlib.import_module('team.engine.build.trainer')\n"
        "print(old is importlib.import_module('lightning_gpu_engine.trainer.trainer'))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr
