"""The watcher that removes a partial output (files.py) once its writer is gone, however it ended: SIGKILL included."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

# Waits for the end of its stdin (every holder of the pipe's other end has ended, however), then removes the partial
# file or folder unless it is gone (published, discarded) or stays locked (another run took it over). The dead
# writer's lock can outlive the pipe by a moment (the kernel releases a dead process's files in no set order): it is
# waited for, briefly.
WATCHER = """import fcntl, os, shutil, stat, sys, time
sys.stdin.buffer.read()
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
    for _ in range(50):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.1)
    else:
        sys.exit()
    if os.fstat(fd).st_ino == os.lstat(sys.argv[1]).st_ino:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            shutil.rmtree(sys.argv[1])
        else:
            os.unlink(sys.argv[1])
except OSError:
    pass
"""


def remove_when_abandoned(partial: Path) -> Callable[[], None]:
    """A watcher in a session of its own, so that what kills this process's group spares it. This process keeps the
    pipe's write end open until it exits, when the kernel closes it. Started before the partial is made: a kill
    between the two would leave a partial no watcher knows of. Returns what ends the watcher unused, for a partial
    that was never made (refused)."""
    read, write = os.pipe()
    watcher = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHER, partial], stdin=read, start_new_session=True)
    os.close(read)
    _watching.append((watcher, write))

    def unused() -> None:
        watcher.kill()
        watcher.wait()
        os.close(write)
        _watching.remove((watcher, write))

    return unused


_watching: list[tuple[subprocess.Popen[bytes], int]] = []  # for the process's life: the watchers, their pipes' ends
