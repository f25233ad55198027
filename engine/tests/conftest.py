"""The engine's tests drive a toy task: the regressor of the engine's guide (docs/bring-your-own-task.md, installed
with the package), taken from its text at test time, so the program users copy is the one these tests run. An MLP on
generated data keeps every run short. The helpers and fixtures for runs on a machine that several suites share are
the package's (lightning_gpu_engine.testing), which a project's suite uses too."""

from __future__ import annotations

import importlib.util
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import lightning_gpu_engine
from lightning_gpu_engine.testing import processes, warm_starts
from lightning_gpu_engine.testing.fixtures import (
    master_port,
    multiprocess_tests_one_at_a_time,
    private_caches,
    references,
)
from lightning_gpu_engine.testing.processes import Launch, run_script
from lightning_gpu_engine.testing.reference_runs import ReferenceRuns
from lightning_gpu_engine.testing.script_runs import first_difference, validations

__all__ = ["master_port", "multiprocess_tests_one_at_a_time", "private_caches", "references"]
DOCS = Path(lightning_gpu_engine.__file__).with_name("docs")  # the guide, as installed with this version

# Pinned, not left to the bake's defaults: 16-mixed and fsdp need CUDA, and these tests must run on any CPU.
# 32 samples in batches of 8: 4 steps an epoch; validation and test get 8 samples, one batch each.
TOY = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--num-workers=0", "--logger=csv"]
TOY += ["--log-every-n-steps=1", "--batch-size=8", "--samples=32"]


def guide(page: str) -> str:
    """A page of the engine's guide (docs/PAGE.md), as this version installed it."""
    return (DOCS / f"{page}.md").read_text()


def python_block(text: str) -> str:
    """The first Python block of a page of the guide: the complete file it gives."""
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]


def guide_task() -> str:
    """The regressor of the guide's "Bring your own task", a complete file."""
    return python_block(guide("bring-your-own-task"))


@pytest.fixture(scope="session")
def my_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guide's task saved as my_task.py, the name the guide gives it."""
    path = tmp_path_factory.mktemp("team") / "my_task.py"
    path.write_text(guide_task())
    return path


@pytest.fixture
def tiny_args(tmp_path: Path) -> list[str]:
    """One epoch of the toy task into tmp_path/run."""
    return [*TOY, "--max-epochs=1", f"--output-dir={tmp_path / 'run'}"]


@pytest.fixture(scope="session")
def toy(my_task: Path) -> ModuleType:
    """my_task.py imported, for runs in this process (`train(toy.TASK, ARGS)`) whose classes a test may patch."""
    spec = importlib.util.spec_from_file_location("my_task", my_task)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["my_task"] = module  # dataclasses resolve the module's string annotations through it
    spec.loader.exec_module(module)
    return module


def run_toy(my_task: Path, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    """`python my_task.py ARGS` in a process of its own, from the folder that holds it (options:
    processes.run_script's)."""
    return run_script(my_task, *args, root=my_task.parent, **options)


def run_engine(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m lightning_gpu_engine ARGS` (bench, sweep) from `cwd`, as a team runs it beside its task's file."""
    command = [sys.executable, "-m", "lightning_gpu_engine", *args]
    env = processes.script_env(cwd)
    return warm_starts.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launch]:
    """Starts a command in tmp_path, each in a process group of its own, killed if still running at the end."""
    with processes.launching(tmp_path) as start:
        yield start


# my_task.py with one more callback, which signals the run's own process group (it leads one, as a job step does) at
# the moment a test chooses: a scheduler's SIGTERM, landing exactly there
SIGNALS_ITSELF = """
import importlib.util, os, signal, sys
import lightning as L
from lightning_gpu_engine import train
from lightning_gpu_engine.trainer import trainer as trainer_module

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
train(task.TASK, sys.argv[1:])
"""


def signalling_task(
    script: Path, my_task: Path, hook: str, condition: str, signum: signal.Signals = signal.SIGTERM
) -> Path:
    """`script`: my_task.py sending `signum` to its process group in callback `hook` (its signature) when `condition`
    holds; run it with `run_toy(script, ..., new_session=True)`."""
    script.write_text(SIGNALS_ITSELF.format(program=str(my_task), hook=hook, condition=condition, signum=int(signum)))
    return script


def uninterrupted(references: ReferenceRuns, program: Path, args: Sequence[str], into: Path) -> Path:
    """`python PROGRAM ARGS` never stopped, its output folder copied to `into`: trained once a session, whichever test
    compares against it first."""
    command = [sys.executable, str(program), *args, "--output-dir={out}"]
    references.copy(command, {"out": into}, program.parent, processes.script_env(program.parent))
    return into


# What a resumed run ends with that must be the uninterrupted run's: the loops hold the epoch, batch, optimizer-step
# and validation counters, exact_resume the random generators and the loader's place in its epoch
ENDS_ALIKE = ("global_step", "epoch", "loops", "state_dict", "optimizer_states", "lr_schedulers", "exact_resume")


def assert_ended_alike(want: Path, got: Path, after: str) -> None:
    """The run in output folder `got`, stopped `after` and resumed, ended as the uninterrupted one in `want`: each of
    ENDS_ALIKE in its last.ckpt bit for bit, and the same validations (validation.jsonl)."""
    ends = [torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True) for out in (want, got)]
    for part in ENDS_ALIKE:
        where = first_difference(ends[0][part], ends[1][part])
        assert where is None, f"{part}{where or ''} differs from the uninterrupted run's after a stop {after}"
    assert validations(got) == validations(want), f"the validations differ after a stop {after}"
