"""`python .ci/reaper.py CMD...`: CMD under a subreaper, as under a normal init.

CI's container has no init that reaps: a process orphaned by a killed run (a loader worker, a rank) stays a zombie,
which tests that count live processes took for alive. Here every orphan of CMD's tree is reparented to this process
(PR_SET_CHILD_SUBREAPER) and reaped as it exits. When CMD ends, whatever of its tree still runs is named and killed,
so that nothing outlives CI; the exit status is CMD's. SIGINT and SIGTERM are passed on to CMD, which starts with
the default SIGINT whatever this process was started with.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def adopted() -> list[int]:
    """The processes reparented to this one that still run (zombies are reaped by the loop, not listed)."""
    me, found = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def main(cmd: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    started: list[subprocess.Popen[bytes]] = []
    # Put in before CMD starts, so that it starts with the default SIGINT, Ctrl-C's, even where CI was started with
    # it ignored (a shell's background job): pytest and the tests' own runs then take SIGINT as a terminal gives it.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, _frame: [child.send_signal(number) for child in started])
    child = subprocess.Popen(cmd)
    started.append(child)
    status = None
    while status is None:
        try:
            pid, wait_status = os.wait()  # the command, or any orphan of its tree
        except ChildProcessError:
            break
        if pid == child.pid:
            status = os.waitstatus_to_exitcode(wait_status)
            child.returncode = status  # reaped here: Popen must not wait for it again
    left = adopted()
    for pid in left:
        print(f"reaper: killing {pid}, left running by the tests: {command_of(pid)}", file=sys.stderr)
        os.kill(pid, signal.SIGKILL)
    for _ in left:
        os.wait()
    code = status if status is not None else 1
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
