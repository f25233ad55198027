"""A run the suites fork warm (testing/warm_starts.py) is the command a user runs, in a process of its own: the same
arguments, folder, environment, streams, session and exit status as a fresh one, without its seconds of imports; and
where a fork cannot stand for a fresh process, the run is a fresh one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_gpu_engine.testing import warm_starts
from lightning_gpu_engine.testing.processes import script_env, without_heavy_imports

# What a script can see of how it was started; "warm" is whether torch was imported before its first line
PROBE = """
import os, signal, sys
print("warm" if "torch" in sys.modules else "fresh", __name__, sys.argv, sys.path[0], os.getcwd(), os.getenv("PROBE"))
print("leads its group" if os.getpgid(0) == os.getpid() else "in its parent's group")
print("to stderr", file=sys.stderr)
if sys.argv[1:] == ["lightning"]:
    import lightning
    sys.exit(0)
if sys.argv[1:] == ["raise"]:
    raise RuntimeError("the probe's own error")
if sys.argv[1:] == ["wait"]:
    print("waiting", flush=True)
    signal.pause()
sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path / "probe.py"


def both(probe: Path, *args: str, path: str = "") -> list[subprocess.CompletedProcess[str]]:
    """The probe run fresh, then warm, with an environment of its own (and `path` first on its PYTHONPATH)."""
    env = script_env(probe.parent, {"PROBE": "set"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env["PYTHONPATH"]) if p)
    command = [sys.executable, "probe.py", *args]
    cwd = probe.parent
    fresh = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    warm = warm_starts.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    return [fresh, warm]


def test_a_warm_run_sees_what_a_fresh_one_sees_and_exits_as_it_does(probe: Path) -> None:
    fresh, warm = both(probe, "3")
    assert fresh.stdout.startswith("fresh ") and warm.stdout.startswith("warm "), "the fork did not stand in"
    assert warm.stdout.removeprefix("warm ") == fresh.stdout.removeprefix("fresh ")
    assert "__main__ ['probe.py', '3']" in warm.stdout and f"{probe.parent} {probe.parent} set" in warm.stdout
    assert (warm.returncode, warm.stderr) == (fresh.returncode, fresh.stderr) == (3, "to stderr\n")


# A sitecustomize.py that prints when Lightning is first imported: in a warm run, that is in the interpreter it forks
NOISY_IMPORT = """
import sys

class Noisy:
    def find_spec(self, name, path=None, target=None):
        if name == "lightning":
            print("importing lightning", file=sys.stderr)

sys.meta_path.insert(0, Noisy())
"""


def test_what_the_imports_print_a_warm_run_prints_too(probe: Path) -> None:
    (probe.parent / "noisy").mkdir()
    (probe.parent / "noisy" / "sitecustomize.py").write_text(NOISY_IMPORT)
    fresh, warm = both(probe, "lightning", path=str(probe.parent / "noisy"))
    assert warm.stdout.startswith("warm ") and warm.returncode == fresh.returncode == 0
    assert warm.stderr == fresh.stderr.replace("to stderr\n", "") + "to stderr\n" == "importing lightning\nto stderr\n"


def test_an_uncaught_error_is_a_traceback_and_exit_status_1(probe: Path) -> None:
    fresh, warm = both(probe, "raise")
    assert fresh.returncode == warm.returncode == 1
    for done in (fresh, warm):
        assert "Traceback" in done.stderr and done.stderr.endswith("RuntimeError: the probe's own error\n")


def test_a_module_run_sees_its_file_as_its_first_argument(probe: Path) -> None:
    env = script_env(probe.parent)
    command = [sys.executable, "-m", "probe", "4"]
    warm = warm_starts.run(command, capture_output=True, text=True, cwd=probe.parent, env=env)
    fresh = subprocess.run(command, capture_output=True, text=True, cwd=probe.parent, env=env)
    assert warm.stdout.startswith("warm ") and warm.stdout.removeprefix("warm ") == fresh.stdout.removeprefix("fresh ")
    assert warm.returncode == fresh.returncode == 4


def test_a_run_in_a_session_of_its_own_leads_its_group_and_a_group_signal_ends_it(probe: Path) -> None:
    env = script_env(probe.parent)
    command = [sys.executable, "probe.py", "wait"]
    pipe = subprocess.PIPE
    run = warm_starts.popen(command, stdout=pipe, text=True, cwd=probe.parent, env=env, start_new_session=True)
    assert isinstance(run, warm_starts.WarmProcess)
    assert run.stdout is not None
    assert run.stdout.readline().startswith("warm ")
    assert run.stdout.readline() == "leads its group\n" and run.stdout.readline() == "waiting\n"
    assert run.poll() is None
    os.killpg(run.pid, signal.SIGTERM)
    assert run.wait(timeout=60) == -signal.SIGTERM


def test_a_run_past_its_timeout_is_killed_and_its_output_kept(probe: Path) -> None:
    env = script_env(probe.parent)
    command = [sys.executable, "probe.py", "wait"]
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        warm_starts.run(command, capture_output=True, text=True, cwd=probe.parent, env=env, timeout=5)
    assert "waiting" in str(timed_out.value.stdout)


def test_where_torch_does_not_import_or_fresh_starts_are_asked_for_a_run_starts_fresh(probe: Path) -> None:
    blocked = without_heavy_imports(probe.parent / "blocked", probe.parent)
    for extra in (blocked, {warm_starts.FRESH: "1"}):
        env = script_env(probe.parent, extra)
        done = warm_starts.run([sys.executable, "probe.py"], capture_output=True, text=True, cwd=probe.parent, env=env)
        assert done.returncode == 0 and done.stdout.startswith("fresh "), done.stdout + done.stderr
