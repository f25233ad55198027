"""`.ci/run` starts pytest under .ci/reaper.py: what it promises CI, shown on commands of a few lines."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

REAPER = Path(__file__).resolve().parents[1] / ".ci" / "reaper.py"


def reaped(code: str, ignore_sigint: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -c CODE` under the reaper, the reaper started as a shell's background job is (SIGINT ignored) or not."""
    ignoring = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    return subprocess.run(
        [sys.executable, REAPER, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=ignoring,
    )


def test_the_command_takes_ctrl_c_as_a_terminal_gives_it_even_where_ci_started_with_it_ignored() -> None:
    """A test that interrupts a pytest run with SIGINT (the GPU evidence's time box) passed or failed by how CI was
    launched: a background job's children inherit SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    done = reaped("import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)", True)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_what_the_command_leaves_running_is_named_and_killed_and_its_exit_status_kept() -> None:
    orphan = "import signal, subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import signal; signal.pause()'])"
    done = reaped(f"{orphan}; sys.exit(3)")
    assert done.returncode == 3
    assert "reaper: killing" in done.stderr and "signal.pause()" in done.stderr, done.stderr
