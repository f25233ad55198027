"""The maintainers' claims about the code, read from the code: engine/UPGRADING.md's table of other packages' private
names names every one the engine's modules reach, file by file."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import lightning_gpu_engine

PACKAGE = Path(lightning_gpu_engine.__file__).parent
UPGRADING = Path(__file__).resolve().parents[1] / "UPGRADING.md"  # maintainers' tables, beside CHANGELOG.md


def private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def reached_privates(source: str) -> set[str]:
    """The private names of other packages (not the standard library's) that a module imports, reads as an attribute
    of what it imported, or asks getattr/hasattr/setattr for by name."""
    tree, names, imported = ast.parse(source), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            outside = [a for a in node.names if a.name.split(".")[0] not in (PACKAGE.name, *sys.stdlib_module_names)]
            imported |= {a.asname or a.name.split(".")[0] for a in outside}
            names |= {part for a in outside for part in a.name.split(".") if private(part)}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in (PACKAGE.name, *sys.stdlib_module_names):
                continue
            imported |= {a.asname or a.name for a in node.names}
            names |= {part for part in node.module.split(".") if private(part)}
            names |= {a.name for a in node.names if private(a.name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in imported:
                names.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) > 1:
            name = node.args[1]
            if node.func.id in ("getattr", "hasattr", "setattr") and isinstance(name, ast.Constant):
                names |= {name.value} if isinstance(name.value, str) and private(name.value) else set()
    return names


def table() -> dict[str, str]:
    """UPGRADING.md's private names of other packages: file -> what its row names."""
    section = UPGRADING.read_text().split("the private names the engine uses")[1].split("\n## ")[0]
    return dict(re.findall(r"^\| `([\w/]+\.py)` \| (.*?) \|", section, flags=re.M))


def test_the_private_names_table_names_every_private_name_the_engine_reaches() -> None:
    rows = table()
    missing = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in reached_privates(path.read_text())
        if name not in rows.get(path.relative_to(PACKAGE).as_posix(), "")
    }
    assert missing == set(), "UPGRADING.md's private-names table misses these"
    assert [f for f in rows if not (PACKAGE / f).is_file()] == [], "the table names files the engine no longer has"


def test_the_check_sees_an_import_an_attribute_and_a_getattr_but_not_the_standard_library() -> None:
    source = (
        "import os\nimport torch\nfrom torch._dynamo.utils import counters\nfrom lightning import _Hidden\n"
        "torch.serialization._get_layout\nos._exit(0)\ngetattr(net, '_compiled_call_impl', None)\n"
    )
    assert reached_privates(source) == {"_dynamo", "_Hidden", "_get_layout", "_compiled_call_impl"}
