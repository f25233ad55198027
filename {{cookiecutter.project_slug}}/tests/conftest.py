"""What every test of either task shares: the project root, and its scripts run as a user runs them.

tests/engine/ drives a toy task (the README's own); tests/<task>/ hold each task's tests and its tiny CPU flags. tests/
and its folders are packages (tests.engine.conftest, ...): several conftest.py files, or test files of one name in two
folders, never shadow each other, and a folder named like the project's package (language_model) cannot hide it. The
files at tests/ itself import this one as `conftest` (pyproject's pythonpath has tests/).
"""

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
from machine_sharing import cores_to_myself, free_port, session_folder
from machine_sharing import private_caches as private_caches_in
from reference_runs import ReferenceRuns

# the bake's task's: its tiny flags (tiny_args), and its refusals of missing files
from tests.{{ cookiecutter.task.replace("-", "_") }}.conftest import MISSING_INPUTS, TINY

ROOT = Path(__file__).resolve().parents[1]
# A stop-and-resume test in both ways of saving: one file (the default), and each rank's part in the background
SAVING = pytest.mark.parametrize(
    "formats", [[], ["--checkpoint-format=sharded", "--async-save"]], ids=["file", "sharded-async"]
)
__all__ = [
    "MISSING_INPUTS",
    "ROOT",
    "TIMEOUT",
    "TINY",
    "Launch",
    "edited",
    "finish",
    "free_port",
    "heavy_imports_blocked",
    "kill_at_pause",
    "launch",
    "one_error_line",
    "run_script",
    "run_train",
    "script_env",
    "wait",
    "wait_until",
    "without_heavy_imports",
]


@pytest.fixture
def tiny_args(tmp_path: Path) -> list[str]:
    """One epoch of the bake's task at its tiniest, into tmp_path/run (tests/engine/ has its own for the toy task)."""
    return [*TINY, "--max-epochs=1", f"--output-dir={tmp_path / 'run'}"]


@pytest.fixture(scope="session", autouse=True)
def private_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every library cache in this session's folder (shared by its xdist workers): no run reads what another
    suite's left, or loses what it wrote to another's clean-up (machine_sharing.py)."""
    root = session_folder(tmp_path_factory.getbasetemp()) / "caches"
    with pytest.MonkeyPatch.context() as patch:
        for variable, folder in private_caches_in(root).items():
            patch.setenv(variable, folder)
        yield root


@pytest.fixture(autouse=True)
def master_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """Every run a test starts, a plain --devices 2 included, meets its ranks on a port of this worker's range: where
    Lightning picks one itself, it binds in the ephemeral range, which another process may have been handed."""
    port = free_port()
    monkeypatch.setenv("MASTER_PORT", str(port))
    return port


@pytest.fixture(autouse=True)
def multiprocess_tests_one_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A test marked `multiprocess` (or a conformance check its class names in `multiprocess_checks`) waits for any
    other such test on the machine to end: two runs of two ranks each on two cores starve each other into timeouts."""
    checks = getattr(getattr(request.node, "cls", None), "multiprocess_checks", ())
    if request.node.get_closest_marker("multiprocess") is None and request.node.originalname not in checks:
        yield
        return
    with cores_to_myself(session_folder(tmp_path_factory.getbasetemp()) / "multiprocess.lock"):
        yield


def script_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, src/ and the root importable even if the project is not installed, one thread per process
    on shared cores; `extra` adds to it."""
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **(extra or {})}


@pytest.fixture(scope="session")
def references(tmp_path_factory: pytest.TempPathFactory) -> ReferenceRuns:
    """The session's uninterrupted reference runs, each trained once (tests/reference_runs.py)."""
    return ReferenceRuns(session_folder(tmp_path_factory.getbasetemp()) / "references")


def run_script(
    script: str | Path,
    *args: str,
    timeout: float = 300,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    new_session: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python SCRIPT ARGS` in a fresh process, as a user would run it: src/ and the root importable even if the
    project is not installed, one thread per process on shared cores. SCRIPT is relative to the root, or absolute;
    `env` adds to the inherited environment; `new_session` for a script that signals its own process group."""
    full_env = script_env(env)
    command = [sys.executable, str(ROOT / script), *args]
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            env=full_env,
            start_new_session=new_session,
        )
    except subprocess.TimeoutExpired as err:  # a hang fails its test with what the run printed, not a bare timeout
        out, errors = (s.decode() if isinstance(s, bytes) else s or "" for s in (err.stdout, err.stderr))
        return subprocess.CompletedProcess(command, -9, out, f"{errors}\nkilled: still running after {timeout:.0f} s")


def run_train(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python train.py ARGS`: the bake's task, as a user trains it."""
    return run_script("train.py", *args, timeout=timeout)


TIMEOUT = 240  # seconds a launched process may take before its test fails as hung
Launch = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def launch() -> Iterator[Launch]:
    """Starts a command in the project root, src/ and the root importable, one thread per process on shared cores.

    Each command gets its own process group, and whatever of it still runs when the test ends is killed.
    """
    started: list[subprocess.Popen[str]] = []

    def start(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        full_env = script_env(env)
        process = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


T = TypeVar("T")


def wait_until(condition: Callable[[], T], process: subprocess.Popen[Any] | None, what: str, every: float = 0.01) -> T:
    """The first true value of `condition`, a state a run makes (a file, a step saved in it), polled while `process`
    goes on: a run that ends first, or a state that never comes within TIMEOUT, fails the test naming `what`. The
    suite waits on states, never for a length of time; this poll is its one allowed sleep."""
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


HEAVY = ("torch", "lightning")  # what a refusal that names a flag or a file must answer before: seconds of imports


def without_heavy_imports(folder: Path) -> dict[str, str]:
    """An environment (for run_script's `env`) in which importing torch or Lightning fails with a traceback: a script
    that answers with one line there answered before either loaded."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in HEAVY:
        (folder / f"{name}.py").write_text(f"raise ImportError('{name} was imported before the answer')\n")
    return {"PYTHONPATH": os.pathsep.join([str(folder), str(ROOT / "src"), str(ROOT)])}


@contextlib.contextmanager
def heavy_imports_blocked() -> Iterator[None]:
    """In this process: an `import torch` or `import lightning` run inside the block raises ImportError, so a refusal
    that comes out of it was given before the entry point imported either (modules loaded earlier stay usable)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in HEAVY:
            patch.setitem(sys.modules, name, None)  # type: ignore[arg-type]  # None: "import halted"
        yield
