"""`<package>.engine` in a project: another name for this package, at every depth.

Projects baked before the engine was a package had its modules in `src/<package>/engine/`, and a team's code imports
them from there (`from <package>.engine.hardware import Hardware`). After the update that path names this package:
each `<package>.engine.X` is the very module object `lightning_gpu_engine.Y` (one copy, so one set of error classes
that `except` can catch), where Y is X or, for a module that moved when the engine became a package, its new place.

Layer 0: imports no other part.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType

# The modules of the engine copied into projects (template releases before 1.0) that moved when it became this
# package; the others kept their names. engine/UPGRADING.md's table says the same, and a test holds both.
MOVED = {
    "checkpoint_checks": "checkpoint.checks",
    "checkpoints": "checkpoint.saving",
    "cli": "config.cli",
    "compile_artifacts": "perf.compile_artifacts",
    "compile_cache": "perf.compile_cache",
    "config": "config.options",
    "eval_split": "data.eval_split",
    "files": "tools.files",
    "guards": "reliability.guards",
    "hardware": "perf.hardware",
    "loaders": "data.loaders",
    "loggers": "trainer.loggers",
    "metric_state": "reliability.metric_state",
    "monitors": "perf.monitors",
    "networks": "perf.networks",
    "object_storage": "tools.object_storage",
    "peaks": "perf.peaks",
    "promises": "perf.promises",
    "quiet": "config.quiet",
    "resume": "reliability.resume",
    "resume_changes": "reliability.resume_changes",
    "rundir": "tools.rundir",
    "script_runs": "testing.script_runs",
    "sharded": "checkpoint.sharded",
    "sharded_read": "checkpoint.sharded_read",
    "sharding": "trainer.sharding",
    "signals": "tools.signals",
    "steps": "trainer.steps",
    "stop_on_signal": "reliability.stop_on_signal",
    "streaming": "data.streaming",
    "streaming_write": "data.streaming_write",
    "testing": "testing.conformance",
    "trainer": "trainer.trainer",
    "validation": "trainer.validation",
}


# Modules of this package that moved in 1.3, when its parts were stacked in layers (docs/layout.md): their 1.2 paths
# keep working, with a DeprecationWarning that names the new one, until 1.4.
RENAMED = {
    "build": "trainer",
    "build.optimizers": "optimizers",
    "checkpoint.files": "tools.files",
    "checkpoint.rundir": "tools.rundir",
    "checkpoint.watcher": "tools.watcher",
    "data.object_storage": "tools.object_storage",
    "perf.profiling": "profiling",
    "reliability.signals": "tools.signals",
}


def renamed(path: str) -> str | None:
    """Where `path`, dotted below this package, is since 1.3; None where it did not move."""
    if path in RENAMED:
        return RENAMED[path]
    first, dot, rest = path.partition(".")
    return f"{RENAMED[first]}{dot}{rest}" if first in RENAMED and dot else None


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


class _Renamed(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a 1.2 path of a module that moved in 1.3 as the module at its new place, and says so once."""

    prefix = __package__ + "."

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = renamed(fullname.removeprefix(self.prefix)) if fullname.startswith(self.prefix) else None
        found = importlib.util.find_spec(self.prefix + new) if new else None
        if found is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=found.submodule_search_locations is not None)

    def exec_module(self, module: ModuleType) -> None:
        new = self.prefix + str(renamed(module.__name__.removeprefix(self.prefix)))
        warnings.warn(
            f"{module.__name__} is {new} since lightning-gpu-engine 1.3; the old path goes in 1.4",
            DeprecationWarning,
            stacklevel=2,
        )
        sys.modules[module.__name__] = importlib.import_module(new)


if not any(isinstance(f, _Renamed) for f in sys.meta_path):
    sys.meta_path.insert(0, _Renamed())  # before the path finder, which would load a second copy below an alias


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
