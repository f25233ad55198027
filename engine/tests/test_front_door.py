"""Public names said once: each part lists its own in its `__all__`, its __init__ imports exactly those (for type
checkers alone where they need torch), and the front door hands out each as the very same object, beside the names of
the engine's top-level modules; a name of a part reaches the front door only through that part's `__all__`."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import lightning_gpu_engine

PARTS = ("config", "tools", "checkpoint", "data", "perf", "reliability", "trainer")  # bench, sweep, testing: doors
FRONT = lightning_gpu_engine.__name__


def part(name: str) -> ModuleType:
    return importlib.import_module(f"{FRONT}.{name}")


def imports_from(module: ModuleType) -> dict[str, str]:
    """Each name that `module` binds by `from X import`, at its top level or for type checkers only: X."""
    tree = ast.parse(Path(module.__file__ or "").read_text())
    statements = [*tree.body, *(s for node in tree.body if isinstance(node, ast.If) for s in node.body)]
    return {
        alias.asname or alias.name: s.module
        for s in statements
        if isinstance(s, ast.ImportFrom) and s.module and s.module.startswith(f"{FRONT}.")
        for alias in s.names
        if alias.name != "*"
    }


def source(name: str) -> str:
    """The module the front door takes `name` from: a part itself, or one of the engine's top-level modules."""
    heavy = lightning_gpu_engine._HEAVY
    return heavy[name][0] if name in heavy else imports_from(lightning_gpu_engine)[name]


def unmatched(front: Any, parts: dict[str, Any], source: Any) -> list[str]:
    """A part's public name that the front door does not hand out as the very same object, and a front-door name
    that comes from inside a part without being in that part's `__all__`."""
    found = []
    for part_name, p in parts.items():
        for name in p.__all__:
            if name not in front.__all__ or getattr(front, name, "missing") is not getattr(p, name, "missing here"):
                found.append(f"{part_name}.{name} is not {FRONT}.{name}")
    for name in front.__all__:
        inside = [p for p in parts if f"{source(name)}.".startswith(f"{FRONT}.{p}.")]
        if inside and name not in parts[inside[0]].__all__:
            found.append(f"{FRONT}.{name} comes from {source(name)}, outside {FRONT}.{inside[0]}.__all__")
    return found


def test_the_front_door_hands_out_each_parts_names_and_only_through_its_all() -> None:
    assert unmatched(lightning_gpu_engine, {p: part(p) for p in PARTS}, source) == []


def test_the_check_sees_a_parts_name_missing_at_the_front_door_and_one_taken_past_its_all() -> None:
    parts: dict[str, Any] = {p: part(p) for p in PARTS}
    perf = {name: getattr(parts["perf"], name) for name in parts["perf"].__all__}
    parts["perf"] = SimpleNamespace(**perf, ghost=1, __all__=[*perf, "ghost"])  # ghost: listed, never re-exported
    front = SimpleNamespace(__all__=[*lightning_gpu_engine.__all__, "Probe"], Probe=3)
    for name in lightning_gpu_engine.__all__:
        setattr(front, name, getattr(lightning_gpu_engine, name))
    taken = {"Probe": f"{FRONT}.perf.monitors"}  # as if the front door imported it from there itself
    assert unmatched(front, parts, lambda name: taken.get(name) or source(name)) == [
        f"perf.ghost is not {FRONT}.ghost",
        f"{FRONT}.Probe comes from {FRONT}.perf.monitors, outside {FRONT}.perf.__all__",
    ]


def test_each_parts_init_imports_exactly_its_all_and_the_front_door_each_name_once() -> None:
    for name in PARTS:
        module = part(name)
        inside = {n for n, m in imports_from(module).items() if m.startswith(f"{module.__name__}.")}
        assert inside == set(module.__all__), name
    assert len(lightning_gpu_engine.__all__) == len(set(lightning_gpu_engine.__all__))
    listed = [n for p in PARTS for n in part(p).__all__]
    assert len(listed) == len(set(listed)), "a name in two parts' __all__"


def test_type_checkers_see_every_front_door_name() -> None:
    """The names it imports (its own modules' at once, the rest for type checkers, a part's through a star import of
    the part's `__all__`): each one it lists, and no other."""
    seen = {n for n, m in imports_from(lightning_gpu_engine).items() if m != f"{FRONT}.tools.first_use"}
    assert seen | set(lightning_gpu_engine._HEAVY) == set(lightning_gpu_engine.__all__)
