"""The engine has one front door: code outside engine/ (tasks, bench/, sweep/, the root scripts) imports engine names
from `<package>.engine` alone, and every name listed there resolves. A team can rely on those names, and on no other."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from conftest import ROOT

from .test_layout import PACKAGE, imported_modules


def side_doors(root: Path, package: Path) -> list[str]:
    """Imports of an engine module from outside engine/: every .py of `package` but engine/'s, and `root`'s scripts
    (those at the root and under _variants/, the other task's copies included)."""
    name, engine = package.name, package / "engine"
    # a module's name is a side door, unless the front door lists the same name (the function run, not run.py)
    modules = {p.stem for p in engine.glob("*.py")} - {"__init__", *front_door(engine / "__init__.py")}
    outside = [p for p in package.rglob("*.py") if engine not in p.parents]
    outside += [*root.glob("*.py"), *(root / "_variants").rglob("*.py")]
    return sorted(
        f"{path.relative_to(root)} imports {module}"
        for path in outside
        for module in imported_modules(path, package.parent if package.parent in path.parents else path.parent)
        if module.startswith(f"{name}.engine.") and module.split(".")[2] in modules
    )


def front_door(init: Path) -> list[str]:
    """The names in the `__all__` of engine/__init__.py."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def test_nothing_outside_the_engine_imports_one_of_its_modules() -> None:
    assert side_doors(ROOT, PACKAGE) == []


def test_the_check_sees_a_side_door_at_any_depth_and_from_a_script(tmp_path: Path) -> None:
    package = tmp_path / "src" / PACKAGE.name
    (package / "engine").mkdir(parents=True)
    (package / "tasks" / "mine").mkdir(parents=True)
    for module in ("cli", "hardware", "run"):
        (package / "engine" / f"{module}.py").write_text("")
    (package / "engine" / "__init__.py").write_text('__all__ = ["Task", "note", "run"]\n')
    (package / "tasks" / "mine" / "module.py").write_text("def f():\n    from ...engine.cli import note\n")
    (package / "tasks" / "mine" / "front.py").write_text("from lightning_gpu_engine import Task, note, run\n")
    (tmp_path / "predict.py").write_text(f"from {PACKAGE.name}.engine import hardware\n")
    assert side_doors(tmp_path, package) == [
        f"predict.py imports {PACKAGE.name}.engine.hardware",
        f"src/{PACKAGE.name}/tasks/mine/module.py imports {PACKAGE.name}.engine.cli",
        f"src/{PACKAGE.name}/tasks/mine/module.py imports {PACKAGE.name}.engine.cli.note",
    ]


def test_every_name_at_the_front_door_resolves() -> None:
    engine = importlib.import_module("lightning_gpu_engine")
    assert set(engine._HEAVY) <= set(engine.__all__), "a name imported on first use is not listed"
    missing = [name for name in engine.__all__ if getattr(engine, name, None) is None]
    assert missing == []
