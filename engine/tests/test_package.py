"""The engine reads like a package: a few subpackages, each with its one-sentence job; parts stacked in the layers their
docstrings state, with no circle between files or between parts; no file a newcomer cannot read in one sitting; and it
imports nothing but the standard library, its dependencies and itself."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import lightning_gpu_engine

PACKAGE = Path(lightning_gpu_engine.__file__).parent  # the installed engine: what a project gets
NAME = PACKAGE.name
MAX_LINES = 250
# What the engine may import besides itself and the standard library: its dependencies' import names, and the
# optional ones it imports where asked (a tracker, the sweep's Optuna, the conformance suite's pytest)
ALLOWED = {"torch", "lightning", "torchmetrics", "numpy", "yaml", "rich", "tensorboard", "litdata", "boto3", "fsspec"}
ALLOWED |= {"botocore", "lightning_utilities", "optuna", "matplotlib", "sqlalchemy", "pytest", "wandb", "mlflow"}


def modules() -> dict[str, Path]:
    """Every module of the engine by its dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, name: str) -> set[str]:
    """The modules `path` imports at any depth, relative imports resolved; those only for type checkers left out."""
    tree = ast.parse(path.read_text())
    checking = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def graph() -> dict[str, set[str]]:
    names = modules()
    return {name: {m for m in imports(path, name) if m in names and m != name} for name, path in names.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle once, as the modules around it (a depth-first search's back edges)."""
    found, state, path = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_the_engine_has_no_import_circles() -> None:
    # a package's __init__ importing its own modules is how a front door works, not a circle
    edges = {n: {m for m in e if not n.startswith(m + ".") and not m.startswith(n + ".")} for n, e in graph().items()}
    assert circles(edges) == []


def test_the_circle_check_sees_one_through_a_function_level_import() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def part(module: str) -> str:
    """The part a module belongs to: its subpackage, its own name at the top, or the front door itself."""
    return module.split(".")[1] if "." in module else module


def part_graph() -> dict[str, set[str]]:
    """Which parts each part imports at run time; the names the front door imports on first use are not counted."""
    edges: dict[str, set[str]] = {}
    for name, targets in graph().items():
        edges.setdefault(part(name), set()).update(part(t) for t in targets if part(t) != part(name))
    return edges


def stated_layers() -> dict[str, tuple[int, set[str]]]:
    """Each part's `Layer N: imports ...` line, from its package's __init__ or its module's docstring."""
    stated = {}
    for name, path in modules().items():
        if name.count(".") > 1 or (name.count(".") == 1 and path.name != "__init__.py" and path.parent != PACKAGE):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        line = re.search(r"^Layer (\d+)\b.*: imports (.*)$", doc, re.M)
        assert line, f"{path.relative_to(PACKAGE)}: its docstring states no `Layer N: imports ...` line"
        stated[part(name)] = (int(line.group(1)), set(re.findall(r"`(\w+)`", line.group(2).split("(")[0])))
    return stated


def test_each_part_imports_only_what_its_docstring_states_and_only_from_below() -> None:
    stated = stated_layers()
    assert stated.keys() == part_graph().keys()
    unstated = {p: sorted(uses - stated[p][1]) for p, uses in part_graph().items() if uses - stated[p][1]}
    assert unstated == {}, "parts that import parts their docstring's layer line does not name"
    upward = {p: sorted(u for u in names if stated[u][0] >= layer) for p, (layer, names) in stated.items()}
    assert {p: u for p, u in upward.items() if u} == {}, "a part that may import a part of its own layer or above"


def test_no_circle_between_parts() -> None:
    assert circles(part_graph()) == []


def test_the_layer_check_sees_a_part_that_imports_upward() -> None:
    edges = part_graph()
    edges["tools"] = edges["tools"] | {"trainer"}
    assert circles(edges)


def test_no_file_is_longer_than_a_sitting() -> None:
    assert {
        n: len(p.read_text().splitlines()) for n, p in modules().items() if len(p.read_text().splitlines()) > MAX_LINES
    } == {}


def test_each_subpackage_says_its_job_in_one_sentence() -> None:
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = (ast.get_docstring(ast.parse(init.read_text())) or "").split("\n\n")[0]
        assert doc.count(". ") == 0 and doc.endswith("."), f"{init.parent.name}: {doc!r} is not one sentence"


def test_the_engine_imports_only_the_standard_library_its_dependencies_and_itself() -> None:
    outside = {
        f"{name} imports {module}"
        for name, path in modules().items()
        for module in imports(path, name)
        if (top := module.split(".")[0]) != NAME and top not in ALLOWED and top not in sys.stdlib_module_names
    }
    assert outside == set()
    declared = {
        r.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip()
        for r in metadata.requires("lightning-gpu-engine") or []
    }
    assert {"torch", "lightning", "litdata"} <= declared


def test_every_name_at_the_front_door_resolves() -> None:
    assert set(lightning_gpu_engine._HEAVY) <= set(lightning_gpu_engine.__all__), (
        "a name imported on first use is not listed"
    )
    assert [name for name in lightning_gpu_engine.__all__ if getattr(lightning_gpu_engine, name, None) is None] == []
