"""`<package>.engine` in a project: another name for this package, at every depth.

Projects baked before the engine was a package had its modules in `src/<package>/engine/`, and a team's code imports
them from there (`from <package>.engine.hardware import Hardware`). After the update that path names this package:
each `<package>.engine.X` is the very module object `lightning_gpu_engine.Y` (one copy, so one set of error classes
that `except` can catch), where Y is X or, for a module that moved when the engine became a package, its new place.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

# The modules of the engine copied into projects (template releases before 1.0) that moved when it became this
# package; the others kept their names. docs/layout.md's "What moved" table says the same, and a test holds both.
MOVED = {
    "checkpoint_checks": "checkpoint.checks",
    "checkpoints": "checkpoint.saving",
    "cli": "config.cli",
    "compile_artifacts": "perf.compile_artifacts",
    "compile_cache": "perf.compile_cache",
    "config": "config.options",
    "eval_split": "data.eval_split",
    "files": "checkpoint.files",
    "guards": "reliability.guards",
    "hardware": "perf.hardware",
    "loaders": "data.loaders",
    "loggers": "build.loggers",
    "metric_state": "reliability.metric_state",
    "monitors": "perf.monitors",
    "networks": "perf.networks",
    "object_storage": "data.object_storage",
    "optimizers": "build.optimizers",
    "peaks": "perf.peaks",
    "profiling": "perf.profiling",
    "promises": "perf.promises",
    "quiet": "config.quiet",
    "resume": "reliability.resume",
    "resume_changes": "reliability.resume_changes",
    "rundir": "checkpoint.rundir",
    "script_runs": "testing.script_runs",
    "sharded": "checkpoint.sharded",
    "sharded_read": "checkpoint.sharded_read",
    "sharding": "build.sharding",
    "signals": "reliability.signals",
    "steps": "build.steps",
    "stop_on_signal": "reliability.stop_on_signal",
    "streaming": "data.streaming",
    "streaming_write": "data.streaming_write",
    "testing": "testing.conformance",
    "trainer": "build.trainer",
    "validation": "build.validation",
}


def new_name(old: str) -> str:
    """The module of this package that `old`, a dotted path below the old `engine` folder, names now."""
    first, dot, rest = old.partition(".")
    return f"{__package__}.{MOVED.get(first, first)}{dot}{rest}"


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `<prefix>.X` as this package's module: the import system keeps what exec_module leaves in sys.modules."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix + "."

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.prefix):
            return None
        real = new_name(fullname.removeprefix(self.prefix))
        try:
            found = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            return None
        if found is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=found.submodule_search_locations is not None)

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__name__] = importlib.import_module(new_name(module.__name__.removeprefix(self.prefix)))


def left_behind(alias: Path) -> dict[str, Path]:
    """The Python files in the old engine's folder beside `alias` (src/<package>/engine.py), by their dotted name
    below it: a team's changes to the copied engine, which the update could not remove and no import reaches now."""
    folder = alias.with_suffix("")
    found = sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts) if folder.is_dir() else []
    return {".".join(p.relative_to(folder).with_suffix("").parts): p for p in found}


def alias_engine(name: str) -> None:
    """Makes module `name` (a project's `<package>.engine`) a package whose every submodule is this package's, and
    names each file of the old engine's folder beside it, which no longer runs."""
    module = sys.modules[name]
    module.__path__ = []  # type: ignore[attr-defined]  # a package to the import system, finding nothing
    if any(isinstance(f, _Alias) and f.prefix == name + "." for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Alias(name))
    for old, path in left_behind(Path(module.__file__ or name)).items():
        print(
            f"warning: {path} no longer runs: {name}.{old} is {new_name(old)} now; port your change to that module "
            f"(or eject the engine: python -m {__package__} eject), then delete this file",
            file=sys.stderr,
        )
