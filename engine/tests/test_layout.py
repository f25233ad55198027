"""The engine stands on its own: no module of engine/ imports a task or the bench, so a team's task can replace ours."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "src" / "{{ cookiecutter.package_name }}"


def imported_modules(path: Path, root: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved from `root` (the folder holding the package), at any
    depth (function-level imports included)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def engine_reaches_out(package: Path) -> list[str]:
    name = package.name
    return sorted(
        f"{path.relative_to(package)} imports {module}"
        for path in (package / "engine").rglob("*.py")
        for module in imported_modules(path, package.parent)
        if module.startswith((f"{name}.tasks", f"{name}.bench"))
    )


def test_the_engine_imports_no_task_and_not_the_bench() -> None:
    assert engine_reaches_out(PACKAGE) == []


def test_the_check_sees_an_import_of_a_task_at_any_depth(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE.name
    (package / "engine").mkdir(parents=True)
    (package / "engine" / "config.py").write_text("def f():\n    from ..tasks.image_classification import TASK\n")
    (package / "engine" / "run.py").write_text(f"from {PACKAGE.name}.bench import harness\n")
    assert engine_reaches_out(package) == [
        f"engine/config.py imports {PACKAGE.name}.tasks.image_classification",
        f"engine/config.py imports {PACKAGE.name}.tasks.image_classification.TASK",
        f"engine/run.py imports {PACKAGE.name}.bench",
        f"engine/run.py imports {PACKAGE.name}.bench.harness",
    ]
