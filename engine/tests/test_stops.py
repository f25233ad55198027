"""Stops as schedulers and terminals deliver them: signals to the whole process group, loader workers included.

Each run is the toy task's `python my_task.py` in its own session; the test waits for what the run prints or writes
before it signals, never for a length of time, and kills the group if anything hangs.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.multiprocessing.reductions import rebuild_storage_fd

from lightning_gpu_engine.reliability.stop_on_signal import StopOnSignal
from lightning_gpu_engine.testing import warm_starts
from lightning_gpu_engine.testing.processes import wait_until
from lightning_gpu_engine.tools.signals import STOP_SIGNALS, waiting_for

from .conftest import run_toy, signalling_task

TIMEOUT = 300  # generous: the CPU is shared
WORKERS = min(2, len(os.sched_getaffinity(0)))


class Run:
    """`python PROGRAM ARGS` as the leader of a new process group, its output read line by line."""

    def __init__(self, program: Path, *args: str, env: dict[str, str] | None = None) -> None:
        extra = env or {}
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra}
        command = [sys.executable, str(program), *args]
        self.process = warm_starts.popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=program.parent,
            env=env,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.output: str | None = None
        self.watchdog = threading.Timer(TIMEOUT, self.kill)  # a hung run fails the test instead of blocking it
        self.watchdog.start()

    def wait_for(self, text: str) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if text in line:
                return
        pytest.fail(f"the run ended before printing {text!r}:\n{''.join(self.lines)[-3000:]}")

    def signal_group(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group may be gone already
            os.killpg(self.process.pid, signal.SIGKILL)

    def finish(self) -> tuple[int, str]:
        if self.output is None:
            self.output = "".join(self.lines) + self.process.communicate()[0]
            self.watchdog.cancel()
        return self.process.returncode, self.output


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.kill()
        run.finish()


def step_of(checkpoint: Path) -> int:
    return int(torch.load(checkpoint, map_location="cpu", weights_only=True)["global_step"])


# An salloc or interactive job: SLURM's variables are there, but Lightning leaves SLURM (and its requeue) out.
INTERACTIVE = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "interactive", "SLURM_JOB_ID": "4242"}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1])
def test_a_stop_signal_to_the_process_group_saves_despite_loader_workers_and_resume_continues(
    signum: int, my_task: Path, runs: list[Run], tiny_args: list[str], tmp_path: Path
) -> None:
    """`timeout`, `scancel`, a closed terminal and SLURM's warning signal every process of the job, loader workers too.

    SIGUSR1 is SLURM's warning before a time limit; where Lightning's requeue does not take it, it stops like SIGTERM.
    """
    env = INTERACTIVE if signum == signal.SIGUSR1 else None
    run = Run(my_task, *tiny_args, f"--num-workers={WORKERS}", "--max-epochs=1000", env=env)
    runs.append(run)
    run.wait_for("epoch 1/1000  batch 1/4")  # a step is done: the loader workers are up and serving
    run.signal_group(signum)
    code, output = run.finish()
    assert code == 128 + signum, output[-3000:]
    assert "Traceback" not in output and "killed by signal" not in output
    name = signal.Signals(signum).name
    assert f"stopped by {name} at step" in output and "continue with --resume last" in output

    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, map_location="cpu", weights_only=True)
    assert saved["global_step"] >= 1
    if signum == signal.SIGTERM:  # resuming works alike whichever signal saved
        resumed = run_toy(my_task, *tiny_args, f"--max-epochs={saved['epoch'] + 1}", "--resume=last")  # end that epoch
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert step_of(last) == 4 * (saved["epoch"] + 1)


class Received(Exception):
    pass


class SignalledDuringHandover:
    """A batch's tensor coming from a loader worker: its file descriptor is fetched from the worker over a socket, and
    a stop signal lands in the middle of that."""

    def detach(self) -> int:
        signal.raise_signal(signal.SIGTERM)
        raise Received


def test_a_stop_ends_a_wait_for_the_workers_at_once_but_lets_a_batch_being_handed_over_arrive(tmp_path: Path) -> None:
    """Raised out of the handover, the stop broke the worker's end of the socket, and the worker printed a traceback
    into a clean stop's output (1 run in 3 on a loaded machine). Let through, the batch arrives, and its step stops."""
    before = {signum: signal.getsignal(signum) for signum in (*STOP_SIGNALS, signal.SIGUSR1)}
    stop = StopOnSignal(tmp_path / "last.ckpt")
    try:
        assert stop._install()
        stop._alone = stop._stepped = True  # one process, after an optimizer step: where a wait may end at once
        with waiting_for():
            with pytest.raises(SIGTERMException):
                signal.raise_signal(signal.SIGTERM)
            stop.signum, stop._stopping = None, False
            with pytest.raises(Received):
                rebuild_storage_fd(torch.UntypedStorage, SignalledDuringHandover(), 0)
        assert stop.signum == signal.SIGTERM and not stop._stopping  # noted: the step after the batch stops
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


# my_task.py with its training loader's workers held at the worst moment until the test's SIGTERM comes, which then
# lands there, on the handlers of that moment: after PyTorch's worker has put in its own SIGTERM handler, before the
# loader's worker_init_fn takes the stop signals away from it. Validation's workers, forked before training, go on.
SLOW_WORKER_START = """
import os, runpy, signal, sys
import lightning as L
from torch.utils.data._utils import signal_handling
from lightning_gpu_engine.trainer import trainer as trainer_module

training = False  # what a worker forked from this process finds: True once training has started

class Training(L.Callback):
    def on_train_start(self, trainer, pl_module):
        global training
        training = True

build_callbacks = trainer_module.build_callbacks
trainer_module.build_callbacks = lambda *args, **kwargs: [*build_callbacks(*args, **kwargs), Training()]
torch_handlers = signal_handling._set_worker_signal_handlers

def slow_start():
    torch_handlers()
    if training:
        print("loader worker starting", flush=True)
        if signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []):  # held back, as the engine forks workers
            signal.sigwait({signal.SIGTERM})
            os.kill(os.getpid(), signal.SIGTERM)  # pending again, as it would have stayed, for what comes next
        else:
            signal.pause()  # the SIGTERM lands on PyTorch's handler

signal_handling._set_worker_signal_handlers = slow_start
sys.argv[0] = MY_TASK
runpy.run_path(MY_TASK, run_name="__main__")
"""


def test_a_group_sigterm_while_loader_workers_start_saves_all_the_same(
    my_task: Path, runs: list[Run], tiny_args: list[str], tmp_path: Path
) -> None:
    program = tmp_path / "slow_workers.py"
    program.write_text(SLOW_WORKER_START.replace("MY_TASK", repr(str(my_task))))
    run = Run(program, *tiny_args, f"--num-workers={WORKERS}", "--max-epochs=1000")
    runs.append(run)
    run.wait_for("Ctrl-C, SIGTERM or SIGHUP saves")  # training starts; its loader's workers come next
    run.wait_for("loader worker starting")
    run.signal_group(signal.SIGTERM)
    code, output = run.finish()
    assert code == 143, output[-3000:]
    assert "Traceback" not in output and "exited unexpectedly" not in output
    assert step_of(tmp_path / "run" / "checkpoints" / "last.ckpt") >= 1


# A script of the team's own that reads a few batches and ends, its loader (and that loader's workers) still alive.
READ_A_BATCH = """
import runpy, sys

data = runpy.run_path(MY_TASK)["RegressionData"](
    features=8, samples=64, noise=0.1, batch_size=8, seed=0, num_workers=2, pin_memory=False
)
data.setup("fit")
batches = iter(data.train_dataloader())
next(batches)
print("read a batch", flush=True)
"""


def test_a_script_that_ends_while_a_loader_is_being_read_exits(my_task: Path, tmp_path: Path) -> None:
    program = tmp_path / "read_a_batch.py"
    program.write_text(READ_A_BATCH.replace("MY_TASK", repr(str(my_task))))
    run = Run(program)
    code, output = run.finish()  # Run's watchdog kills the script if it hangs at exit
    assert code == 0 and "read a batch" in output, output[-3000:]


def test_repeated_ctrl_c_still_saves_and_exits_130(
    my_task: Path, runs: list[Run], tiny_args: list[str], tmp_path: Path
) -> None:
    run = Run(my_task, *tiny_args, "--max-epochs=1000")
    runs.append(run)
    run.wait_for("epoch 1/1000  batch 1/4")
    while run.process.poll() is None:  # a user pressing Ctrl-C again and again until the run is gone
        run.signal_group(signal.SIGINT)
        time.sleep(0.02)
    code, output = run.finish()
    assert code == 130, output[-3000:]
    assert "Traceback" not in output
    assert step_of(tmp_path / "run" / "checkpoints" / "last.ckpt") >= 1


@pytest.mark.parametrize("every", ["3steps", "0.001s"])
def test_a_hard_kill_loses_at_most_checkpoint_every_and_resume_continues(
    every: str, my_task: Path, runs: list[Run], tiny_args: list[str], tmp_path: Path
) -> None:
    """SIGKILL (the OOM killer, a node lost) cannot be caught: what survives is the last periodic checkpoint."""
    # 500 steps in the epoch: the toy is fast, and the kill must come before the epoch's own save
    args = [*tiny_args, "--samples=4000", f"--checkpoint-every={every}"]
    run = Run(my_task, *args)
    runs.append(run)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    wait_until(last.exists, run.process, "a periodic checkpoint")  # renamed into place when whole
    run.signal_group(signal.SIGKILL)
    run.finish()
    saved = step_of(last)
    assert saved < 500, saved  # a periodic save mid-epoch, not the one at the epoch's end
    if every == "0.001s":  # by time: the clock says a save is due after every step
        return
    assert saved % 3 == 0, saved

    resumed = run_toy(my_task, *args, "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Restoring states from the checkpoint path at {last}" in resumed.stderr
    assert step_of(last) == 500


def test_a_second_run_in_the_same_output_dir_is_refused_while_the_first_runs(
    my_task: Path, runs: list[Run], tiny_args: list[str], tmp_path: Path
) -> None:
    first = Run(my_task, *tiny_args, "--max-epochs=1000")
    runs.append(first)
    first.wait_for("epoch 1/1000  batch 1/4")
    second = run_toy(my_task, *tiny_args, "--resume=auto")  # as a duplicate SLURM job would start
    assert second.returncode == 2
    assert second.stderr.strip().splitlines() == [
        f"error: --output-dir: another run (pid {first.process.pid}) is using {tmp_path / 'run'}; "
        "wait for it, or give another --output-dir"
    ]
    assert first.process.poll() is None  # and the first run goes on


@pytest.mark.multiprocess
def test_ddp_stops_together_on_every_group_sigterm_and_resumes(
    my_task: Path, runs: list[Run], tiny_args: list[str], tmp_path: Path
) -> None:
    """Both ranks get each SIGTERM; they must agree on one step, save once and exit 143, never hang. The stops land
    where a scheduler's may: a first step, an epoch's last, a validation batch, mid-epoch, and one step drawn at random
    from a seed the test prints, which reproduces it."""
    args = [*tiny_args, "--devices=2", "--strategy=ddp", "--samples=480", "--max-epochs=1000", "--max-steps=150"]
    seed = int(os.environ.get("STOP_SEED", random.randrange(2**32)))
    print(f"STOP_SEED={seed}")
    drawn = random.Random(seed).randrange(91, 150)
    # 30 steps an epoch, then 8 batches of validation; rank 0 signals the whole group, as a scheduler would
    step_done = "on_train_batch_end(self, trainer, *args)"
    validation = "on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0)"
    in_training = "not trainer.sanity_checking"
    stops = [
        ("the first step", step_done, "trainer.global_step == 1"),
        ("an epoch's last step", step_done, "trainer.global_step == 30"),
        ("a validation batch", validation, f"{in_training} and trainer.current_epoch == 1 and batch_idx == 3"),
        ("mid-epoch", step_done, "trainer.global_step == 75"),
        (f"step {drawn} (STOP_SEED={seed})", step_done, f"trainer.global_step == {drawn}"),
    ]
    last, saved = tmp_path / "run" / "checkpoints" / "last.ckpt", 0
    for where, hook, condition in stops:
        script = signalling_task(tmp_path / "stops.py", my_task, hook, f"trainer.global_rank == 0 and {condition}")
        run = Run(script, *args, *(["--resume=last"] if last.exists() else []))
        runs.append(run)
        code, output = run.finish()
        assert code == 143, f"stopped at {where}:\n{output[-3000:]}"
        assert "Traceback" not in output and "stopped by SIGTERM at step" in output, output[-3000:]
        assert output.count("stopped by SIGTERM") == 1  # rank 0 speaks for the run
        assert step_of(last) >= saved, where
        saved = step_of(last)
    finished = run_toy(my_task, *args, "--resume=last")
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert step_of(last) == 150


def test_a_stop_during_the_final_test_says_so_and_the_command_it_gives_runs_the_test(
    my_task: Path, runs: list[Run], tiny_args: list[str]
) -> None:
    run = Run(my_task, *tiny_args, "--samples=200000", "--max-steps=2")  # 6250 test batches to stop in
    runs.append(run)
    run.wait_for("Loaded model weights from the checkpoint at")  # the test stage has begun
    run.signal_group(signal.SIGTERM)
    code, output = run.finish()
    assert code == 143, output[-3000:]  # not 0: a scheduler must not record a finished job
    assert "Traceback" not in output
    [line] = [line for line in output.splitlines() if line.startswith("stopped by SIGTERM during the final test")]
    python, script, *args = line.split("Test it with: ")[1].split()
    assert (python, script) == ("python", my_task.name), "the command names the script that was run"
    tested = run_toy(my_task, *args)
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert "test/loss=" in tested.stdout
