"""A project's scripts run as their users run them, and waits on what a run announces: the helpers that the engine's
suite and a project's suite share. Every run is one thread per process, for cores that several runs share."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch

from lightning_gpu_engine.testing import warm_starts

TIMEOUT = 240  # seconds a launched process may take before its test fails as hung
HEAVY = ("torch", "lightning")  # what a refusal that names a flag or a file must answer before: seconds of imports
# A stop-and-resume test in both ways of saving: one file (the default), and each rank's part in the background
SAVING = pytest.mark.parametrize(
    "formats", [[], ["--checkpoint-format=sharded", "--async-save"]], ids=["file", "sharded-async"]
)
Launch = Callable[..., "subprocess.Popen[str]"]
T = TypeVar("T")


def script_env(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, `root`/src and `root` importable even if the project is not installed, one thread per
    process on shared cores; `extra` adds to it."""
    path = os.pathsep.join([str(root / "src"), str(root), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **(extra or {})}


def run_script(
    script: Path,
    *args: str,
    root: Path,
    timeout: float = 300,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    new_session: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python SCRIPT ARGS` in a process of its own (warm_starts) from `cwd` (default: `root`), as a user would run it
    (script_env); `env` adds to the inherited environment; `new_session` for a script that signals its own process
    group."""
    command = [sys.executable, str(script), *args]
    try:
        return warm_starts.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd or root,
            env=script_env(root, env),
            start_new_session=new_session,
        )
    except subprocess.TimeoutExpired as err:  # a hang fails its test with what the run printed, not a bare timeout
        out, errors = (s.decode() if isinstance(s, bytes) else s or "" for s in (err.stdout, err.stderr))
        return subprocess.CompletedProcess(command, -9, out, f"{errors}\nkilled: still running after {timeout:.0f} s")


@contextlib.contextmanager
def launching(root: Path) -> Iterator[Launch]:
    """Starts commands in `root` (script_env), each in a process group of its own; whatever of them still runs when
    the block ends is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        process = warm_starts.popen(
            cmd,
            cwd=root,
            env=script_env(root, env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()


def wait_until(condition: Callable[[], T], process: subprocess.Popen[Any] | None, what: str, every: float = 0.01) -> T:
    """The first true value of `condition`, a state a run makes (a file, a step saved in it), polled while `process`
    goes on: a run that ends first, or a state that never comes within TIMEOUT, fails the test naming `what`. The
    suites wait on states, never for a length of time; this poll is their one allowed sleep."""
    deadline = time.monotonic() + TIMEOUT
    while not (found := condition()):
        if process is not None and process.poll() is not None:
            pytest.fail(f"the run ended (exit {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {TIMEOUT} s")
        time.sleep(every)
    return found


def wait(process: subprocess.Popen[str]) -> str:
    try:
        return process.communicate(timeout=TIMEOUT)[0]
    except subprocess.TimeoutExpired:
        pytest.fail(f"no exit within {TIMEOUT} s")


def finish(process: subprocess.Popen[str]) -> str:
    output = wait(process)
    assert process.returncode == 0, output[-3000:]
    return output


def kill_at_pause(killed: subprocess.Popen[str], at: int) -> None:
    """Reads a launched run's output up to "paused at step AT", then kills its whole group at once, as the OOM killer
    or a lost node would; a run that never pauses there fails the test with its output."""
    watchdog = threading.Timer(TIMEOUT, os.killpg, (killed.pid, signal.SIGKILL))  # a hang fails instead of blocking
    watchdog.start()
    paused = any(f"paused at step {at}" in line for line in killed.stdout or [])  # reads up to that line
    watchdog.cancel()
    os.killpg(killed.pid, signal.SIGKILL)
    assert paused, wait(killed)[-3000:]
    wait(killed)  # gone, and with it its lock on the output dir


def edited(real: Path, tmp: Path, edit: Callable[[dict[str, Any]], Any]) -> Path:
    """A copy of the checkpoint `real`, changed by `edit` (in place, or by returning the new contents)."""
    checkpoint = torch.load(real, map_location="cpu", weights_only=True)
    path = tmp / "edited.ckpt"
    changed = edit(checkpoint)
    torch.save(checkpoint if changed is None else changed, path)
    return path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one `error:` line an entry point printed, with no traceback."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


def without_heavy_imports(folder: Path, root: Path) -> dict[str, str]:
    """An environment (for run_script's `env`) in which importing torch or Lightning fails with a traceback: a script
    that answers with one line there answered before either loaded."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in HEAVY:
        (folder / f"{name}.py").write_text(f"raise ImportError('{name} was imported before the answer')\n")
    return {"PYTHONPATH": os.pathsep.join([str(folder), str(root / "src"), str(root)])}


@contextlib.contextmanager
def heavy_imports_blocked() -> Iterator[None]:
    """In this process: an `import torch` or `import lightning` run inside the block raises ImportError, so a refusal
    that comes out of it was given before the entry point imported either (modules loaded earlier stay usable)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in HEAVY:
            patch.setitem(sys.modules, name, None)  # type: ignore[arg-type]  # None: "import halted"
        yield
