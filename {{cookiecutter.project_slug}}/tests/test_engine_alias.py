"""This package's `engine`, the engine's old place in repos baked before it was a package: code a team wrote against
it keeps importing, as the engine's own module objects, at every depth."""

from __future__ import annotations

import importlib
from pathlib import Path

import lightning_gpu_engine
import pytest

PACKAGE = "{{ cookiecutter.package_name }}"

# after `python -m lightning_gpu_engine eject` the engine's copy is src/<package>/engine/ itself, with its new layout
pytestmark = pytest.mark.skipif(
    not (Path(importlib.import_module(PACKAGE).__file__ or "").parent / "engine.py").is_file(),
    reason="the engine was ejected into this package: its engine/ is the engine itself, not another name for it",
)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("hardware", "perf.hardware"),
        ("checkpoints", "checkpoint.saving"),
        ("module", "module"),
        ("tools.files", "tools.files"),
    ],
)
def test_an_old_engine_module_is_the_engines_own(old: str, new: str) -> None:
    through_alias = importlib.import_module(f"{PACKAGE}.engine.{old}")
    assert through_alias is importlib.import_module(f"lightning_gpu_engine.{new}")


def test_an_error_class_raised_by_the_engine_is_caught_through_the_old_name() -> None:
    files = importlib.import_module(f"{PACKAGE}.engine.tools.files")
    hardware = importlib.import_module(f"{PACKAGE}.engine.hardware")
    assert files.OutputBusyError is lightning_gpu_engine.OutputBusyError
    assert hardware.Hardware is lightning_gpu_engine.Hardware


def test_a_module_the_engine_never_had_is_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{PACKAGE}.engine.no_such_module")
