"""The engine's tests drive a toy task: the README's "Bring your own task" regressor, taken from the README's text at
test time, so the program users copy is the one these tests run. An MLP on generated data keeps every run short."""

from __future__ import annotations

import importlib.util
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import ROOT, run_script
from lightning_gpu_engine import main

# Pinned, not left to the bake's defaults: 16-mixed and fsdp need CUDA, and these tests must run on any CPU.
# 32 samples in batches of 8: 4 steps an epoch; validation and test get 8 samples, one batch each.
TOY = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--num-workers=0", "--logger=csv"]
TOY += ["--log-every-n-steps=1", "--batch-size=8", "--samples=32"]


def readme_task() -> str:
    """The Python block under the README's "Bring your own task" heading."""
    section = (ROOT / "README.md").read_text().split("\n## Bring your own task\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the section holds one complete Python file"
    return blocks[0]


@pytest.fixture(scope="session")
def my_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's task saved as my_task.py, the name the README gives it."""
    path = tmp_path_factory.mktemp("team") / "my_task.py"
    path.write_text(readme_task())
    return path


@pytest.fixture
def tiny_args(tmp_path: Path) -> list[str]:
    """One epoch of the toy task into tmp_path/run."""
    return [*TOY, "--max-epochs=1", f"--output-dir={tmp_path / 'run'}"]


@pytest.fixture(scope="session")
def toy(my_task: Path) -> ModuleType:
    """my_task.py imported, for runs in this process (`train(toy, ARGS)`) whose classes a test may patch."""
    spec = importlib.util.spec_from_file_location("my_task", my_task)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["my_task"] = module  # dataclasses resolve the module's string annotations through it
    spec.loader.exec_module(module)
    return module


def train(toy: ModuleType, argv: list[str]) -> dict[str, Any]:
    """What `python my_task.py ARGV` runs, in this process: its metrics, or SystemExit as the command would exit."""
    return main(toy.TASK, argv)


def run_toy(my_task: Path, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    """`python my_task.py ARGS` in a fresh process, from the folder that holds it (options: conftest.run_script's)."""
    return run_script(my_task, *args, cwd=my_task.parent, **options)


# my_task.py with one more callback, which signals the run's own process group (it leads one, as a job step does) at
# the moment a test chooses: a scheduler's SIGTERM, landing exactly there
SIGNALS_ITSELF = """
import importlib.util, os, signal, sys
import lightning as L
from lightning_gpu_engine import main
from lightning_gpu_engine.build import trainer as trainer_module

class SignalHere(L.Callback):
    def {hook}:
        if {condition}:
            os.killpg(os.getpgid(0), {signum})

spec = importlib.util.spec_from_file_location("my_task", {program!r})
task = importlib.util.module_from_spec(spec)
sys.modules["my_task"] = task
spec.loader.exec_module(task)
build_callbacks = trainer_module.build_callbacks
trainer_module.build_callbacks = lambda *args, **kwargs: [*build_callbacks(*args, **kwargs), SignalHere()]
main(task.TASK, sys.argv[1:])
"""


def signalling_task(
    script: Path, my_task: Path, hook: str, condition: str, signum: signal.Signals = signal.SIGTERM
) -> Path:
    """`script`: my_task.py sending `signum` to its process group in callback `hook` (its signature) when `condition`
    holds; run it with `run_toy(script, ..., new_session=True)`."""
    script.write_text(SIGNALS_ITSELF.format(program=str(my_task), hook=hook, condition=condition, signum=int(signum)))
    return script
