"""A read of the next batch that fails in one line (an object store's outage: data/streaming.py) loses nothing: the
step before it is saved, and a stop signal noted since that step's agreement is honoured, exit 128 + the signal,
both said. Through my_task.py, its training set failing once a flag file appears, and a callback that runs after
StopOnSignal's and signals the run's own process group there, as a scheduler's SIGTERM may land."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from .conftest import TOY, run_toy

# my_task.py whose training set fails (once) after the flag, and a callback that at step STEP sends SIGNUM to the
# group (0: none) and raises the flag (OUTAGE); run with new_session=True
FAILS_ONCE = """
import importlib.util, os, sys
from pathlib import Path
import lightning as L
from torch.utils.data import Dataset
from lightning_gpu_engine import ConfigError, train
from lightning_gpu_engine.trainer import trainer as trainer_module

FLAG, DONE = Path({flag!r}), Path({flag!r} + ".done")

class Outage(Dataset):
    def __init__(self, inner):
        self.inner = inner
    def __len__(self):
        return len(self.inner)
    def __getitem__(self, index):
        if FLAG.exists() and not DONE.exists():
            DONE.touch()
            raise ConfigError("data_dir", "cannot reach the S3 endpoint (this test's outage); --resume last continues")
        return self.inner[index]

class LateSignal(L.Callback):  # after StopOnSignal's hooks: the step's agreement has been made without it
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == {step}:
            if {outage}:
                FLAG.touch()
            if {signum}:
                os.killpg(os.getpgid(0), {signum})

spec = importlib.util.spec_from_file_location("my_task", {program!r})
task = importlib.util.module_from_spec(spec)
sys.modules["my_task"] = task
spec.loader.exec_module(task)
setup = task.RegressionData.setup
def failing_setup(self, stage):
    setup(self, stage)
    self.splits["train"] = Outage(self.splits["train"])
task.RegressionData.setup = failing_setup
build_callbacks = trainer_module.build_callbacks
trainer_module.build_callbacks = lambda *args, **kwargs: [*build_callbacks(*args, **kwargs), LateSignal()]
train(task.TASK, sys.argv[1:])
"""
STEP = 5  # of 8 (2 epochs of 4): mid-epoch, after the periodic saves of --checkpoint-every 2steps


def script(tmp_path: Path, my_task: Path, outage: bool, signum: int) -> Path:
    path = tmp_path / "fails_once.py"
    flag = str(tmp_path / "outage")
    path.write_text(FAILS_ONCE.format(program=str(my_task), flag=flag, step=STEP, outage=outage, signum=signum))
    return path


def saved(out: Path) -> dict:
    return torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


# (loader workers, the read after STEP fails, the signal): with a worker, the noted stop ends the next wait for a
# batch at once, before any read could fail
CASES = [(0, True, signal.SIGTERM), (0, True, 0), (0, False, signal.SIGTERM), (1, False, signal.SIGTERM)]


@pytest.mark.parametrize(("workers", "outage", "signum"), CASES, ids=["stop+outage", "outage", "stop", "stop-worker"])
def test_the_step_before_a_failed_read_is_saved_and_a_stop_noted_late_is_honoured(
    workers: int, outage: bool, signum: int, my_task: Path, tmp_path: Path
) -> None:
    args = [*TOY, "--max-epochs=2", f"--num-workers={workers}", "--checkpoint-every=2steps"]
    whole = run_toy(my_task, *args, f"--output-dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "run"
    done = run_toy(script(tmp_path, my_task, outage, signum), *args, f"--output-dir={out}", new_session=True)
    said = [line for line in done.stderr.splitlines() if line.startswith(("error:", "stopped by", "step "))]
    where = out / "checkpoints" / "last.ckpt"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == (128 + signum if signum else 2), done.stderr[-3000:]
    error = ["error: --data-dir: cannot reach the S3 endpoint (this test's outage); --resume last continues"]
    # read by this process, a batch has no wait to end: a stop with no failure comes at the next step's agreement
    step = STEP + 1 if signum and not outage and not workers else STEP
    if signum:
        assert said == [
            *(error if outage else []),
            f"stopped by SIGTERM at step {step}: saved {where}; continue with --resume last",
        ]
    else:
        assert said == [*error, f"step {STEP}, the last one done, is saved in {where}: --resume last continues from it"]
    assert saved(out)["global_step"] == step  # not the periodic save of step 4
    resumed = run_toy(my_task, *args, f"--output-dir={out}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got, want = saved(out), saved(tmp_path / "whole")
    assert got["global_step"] == want["global_step"] == 8
    for name, weight in want["state_dict"].items():
        assert torch.equal(got["state_dict"][name], weight), f"{name} differs from the uninterrupted run's"
