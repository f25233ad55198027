"""What the guide and engine/UPGRADING.md say about names, read from the code: the stable names of docs/layout.md are
`Task`'s fields and the front doors' `__all__`, and UPGRADING.md's table of the modules that moved in 1.3 is the one
the old paths follow."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

from lightning_gpu_engine import Task
from lightning_gpu_engine.moved import RENAMED

from .conftest import guide

UPGRADING = Path(__file__).resolve().parents[1] / "UPGRADING.md"  # maintainers' tables, beside CHANGELOG.md


def stable_names() -> str:
    return guide("layout").split("## Front doors and stable names\n")[1].split("\n## ")[0]


def named_fields(section: str) -> list[str]:
    """The names the section lists as `Task`'s fields, in its order."""
    listed = section.split("these fields of `Task`, with their meaning:")[1].split(". ")[0]
    return re.findall(r"`(\w+)`", listed)


def test_the_stable_names_are_every_field_of_task_and_no_other() -> None:
    assert named_fields(stable_names()) == [f.name for f in dataclasses.fields(Task)]


def test_the_check_sees_a_field_the_section_leaves_out() -> None:
    section = "these fields of `Task`, with their meaning: `name`, `options`. A change"
    assert named_fields(section) == ["name", "options"] != [f.name for f in dataclasses.fields(Task)]


def test_each_front_door_the_section_names_is_a_module_of_the_engine() -> None:
    doors = set(re.findall(r"`(lightning_gpu_engine(?:\.(?!__all__)\w+)?)(?:\.__all__)?`", stable_names()))
    assert doors == {"lightning_gpu_engine", *(f"lightning_gpu_engine.{d}" for d in ("bench", "sweep", "testing"))}
    for door in doors:
        importlib.import_module(door)
    assert "Task" in importlib.import_module("lightning_gpu_engine").__all__


def test_upgradings_table_of_13_is_the_one_the_old_paths_follow() -> None:
    section = UPGRADING.read_text().split("## From 1.2 to 1.3\n")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `lightning_gpu_engine\.([\w.]+)` \| `lightning_gpu_engine\.([\w.]+)` \|$", section, re.M)
    assert dict(rows) == RENAMED
