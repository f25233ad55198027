"""One name trains a task: `train(task, argv)`, the whole of a task's script (the guide's my_task.py ends with it).
1.2's two names for it, `main` and `run`, still train until 1.4, with a DeprecationWarning that names `train`."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lightning_gpu_engine import train
from lightning_gpu_engine.tools.signals import WORKER_IGNORES

from .conftest import guide, run_toy

# A team's script of 1.2, in a fresh interpreter: the old name imported, then called as train is
OLD_NAME = """
import importlib.util, sys, warnings
spec = importlib.util.spec_from_file_location("my_task", {program!r})
task = importlib.util.module_from_spec(spec)
sys.modules["my_task"] = task
spec.loader.exec_module(task)
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    from lightning_gpu_engine import {name}
print("said:", sorted({{str(w.message) for w in said if issubclass(w.category, DeprecationWarning)}}))
print("metrics:", sorted({name}(task.TASK, sys.argv[1:])))
"""


def test_the_guides_script_trains_through_train() -> None:
    assert 'if __name__ == "__main__":\n    train(TASK)\n' in guide("bring-your-own-task")


@pytest.mark.parametrize("name", ["run", "main"])
def test_an_old_name_trains_with_a_deprecation_line_naming_train(
    name: str, my_task: Path, tiny_args: list[str], tmp_path: Path
) -> None:
    script = tmp_path / f"old_{name}.py"
    script.write_text(OLD_NAME.format(program=str(my_task), name=name))
    done = run_toy(script, *tiny_args)
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stdout.splitlines() if line.startswith(("said:", "metrics:"))]
    assert said[0] == (
        f"said: ['lightning_gpu_engine.{name} is lightning_gpu_engine.train since lightning-gpu-engine 1.3 "
        "(train(task, argv) returns the metrics); the old name goes in 1.4']"
    )
    assert "'test/loss'" in said[1] and "test/loss=" in done.stdout, done.stdout[-2000:]
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


def ctrl_c(cfg: Any, opts: Any) -> None:
    raise KeyboardInterrupt  # Ctrl-C while the inputs are checked: before the training loop, where nothing is saved


def test_in_a_process_that_trains_again_the_stops_count_again(
    toy: ModuleType, tiny_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that a signal stopped ignores further ones, so that a Ctrl-C pressed again while Python exits keeps the
    exit code; a test or a notebook that trains again gets the handlers it had."""
    before = {s: signal.getsignal(s) for s in WORKER_IGNORES}
    try:
        with pytest.raises(SystemExit) as stopped:
            train(dataclasses.replace(toy.TASK, check_inputs=ctrl_c), tiny_args)
        assert stopped.value.code == 128 + signal.SIGINT and capsys.readouterr().err == "stopped by SIGINT\n"
        assert {s: signal.getsignal(s) for s in WORKER_IGNORES} == dict.fromkeys(WORKER_IGNORES, signal.SIG_IGN)
        with pytest.raises(SystemExit) as refused:
            train(toy.TASK, [*tiny_args, "--max-epochs=-1"])
        assert refused.value.code == 2
        assert {s: signal.getsignal(s) for s in WORKER_IGNORES} == before
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
