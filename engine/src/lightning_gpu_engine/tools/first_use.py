"""A package's public names imported when first used, so that `train.py --help` and a bad flag answer before torch
and Lightning load: the `if TYPE_CHECKING:` block of the package's `__init__` imports each name for type checkers,
and says here where each one is."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any


def typed_imports(package: str) -> dict[str, tuple[str, str]]:
    """Each name that the `if TYPE_CHECKING:` block of `package`'s __init__ imports: (its module, its name there). A
    star import stands for its module's `__all__`: a light module, as each part's __init__ is."""
    where: dict[str, tuple[str, str]] = {}
    # the loader's source, not the file's: a wheel on sys.path imports from inside its zip (scripts/gpu_evidence.sh)
    source = sys.modules[package].__loader__.get_source(package)  # type: ignore[union-attr]
    for node in ast.parse(source or "").body:
        if not isinstance(node, ast.If) or ast.unparse(node.test) != "TYPE_CHECKING":
            continue
        for imported in (n for n in node.body if isinstance(n, ast.ImportFrom)):
            module = importlib.util.resolve_name("." * imported.level + (imported.module or ""), package)
            for alias in imported.names:
                names = importlib.import_module(module).__all__ if alias.name == "*" else [alias.name]
                where.update({alias.asname or name: (module, name) for name in names})
    return where


def first_use(package: str, where: dict[str, tuple[str, str]] | None = None) -> Callable[[str], Any]:
    """`package`'s `__getattr__`: each of its typed imports (or of `where`), imported when first asked for."""
    found = typed_imports(package) if where is None else where

    def attribute(name: str) -> Any:
        if name not in found:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, original = found[name]
        return getattr(importlib.import_module(module), original)

    return attribute
