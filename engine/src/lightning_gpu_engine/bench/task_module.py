"""`--task MODULE` of sweep.py and bench.py: a team's own task, found the way Python finds a module, run the way its
author runs it (`python my_task.py`), with no copy of either script.

MODULE is a module name importable from the current directory (`my_task`), a dotted path (`team.tasks.ranker`), or
the path of a .py file (`tasks/my_task.py`); its `TASK` attribute is the `Task`. Importing it runs none of its training:
the guide's task file trains only under `if __name__ == "__main__":`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path

from lightning_gpu_engine import Task, fail

HOW = "a module importable from here (my_task), a dotted path (team.my_task) or a .py file (tasks/my_task.py)"


@dataclass(frozen=True)
class TaskModule:
    task: Task
    program: list[str]  # what follows `python` to train it: ["my_task.py"], or ["-m", "team.my_task"]

    @property
    def shown(self) -> str:
        """The training command as a user types it, for sweep.py's `reproduce:` line."""
        return " ".join(["python", *self.program])


def peek_task(argv: list[str] | None) -> str | None:
    """--task, read before the other arguments: bench.py hands a team's task its whole command line, and sweep.py's
    defaults (the metric) come from the task."""
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--task")
    return peek.parse_known_args(sys.argv[1:] if argv is None else argv)[0].task


def check_task(spec: str) -> None:
    """`spec` names a .py file that is there or a module Python finds, without importing it (a task module imports
    Lightning): a typo is one line, exit 2, before torch loads."""
    if _is_file(spec):
        _file(spec)
    else:
        _module(spec)


def load_task(spec: str) -> TaskModule:
    """The Task of `spec`, and how to train it in a subprocess; a missing module or TASK is one line, exit 2."""
    if _is_file(spec):
        return _from_file(spec)
    found = _module(spec)
    module = importlib.import_module(spec)  # an error inside the team's own module is theirs: its traceback shows
    program = ["-m", spec] if "." in spec else [_relative(Path(str(found.origin)))]
    return TaskModule(_task_of(module, spec), program)


def _is_file(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or "/" in spec


def _module(spec: str) -> ModuleSpec:
    if os.getcwd() not in sys.path and "" not in sys.path:  # a script's sys.path starts at its own folder, not here
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(spec)
    except (ModuleNotFoundError, ValueError):  # a parent package that is not there, or an empty name part
        found = None
    if found is None or found.origin is None:
        fail(f"--task: no module named {spec!r}; give {HOW}")
    return found


def _file(spec: str) -> Path:
    path = Path(spec)
    if not path.is_file() or path.suffix != ".py":
        fail(f"--task: {spec} {'is not a .py file' if path.exists() else 'does not exist'}; give {HOW}")
    return path


def _from_file(spec: str) -> TaskModule:
    path = _file(spec)
    folder = str(path.resolve().parent)
    if folder not in sys.path:  # as `python my_task.py` would: the file's folder first, for its sibling modules
        sys.path.insert(0, folder)
    found = importlib.util.spec_from_file_location(path.stem, path)
    assert found is not None and found.loader is not None  # a readable .py file always has both
    module = importlib.util.module_from_spec(found)
    sys.modules[path.stem] = module  # before it runs: its dataclasses resolve their annotations through sys.modules
    found.loader.exec_module(module)
    return TaskModule(_task_of(module, spec), [spec])


def _task_of(module: object, spec: str) -> Task:
    task = getattr(module, "TASK", None)
    if task is None:
        fail(f"--task: {spec} has no TASK; define TASK = Task(...) in it, as the guide's bring-your-own-task.md does")
    if not isinstance(task, Task):
        fail(f"--task: {spec}'s TASK is a {type(task).__name__}, not a Task")
    return task


def _relative(path: Path) -> str:
    """`my_task.py` rather than /home/me/project/my_task.py when it lies under the current directory."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
