"""Outputs that appear whole or not at all: written under a fixed hidden name beside the final one, then renamed.

The name is fixed (`.<name>.partial<suffix>`), not random: a lock on it keeps two runs from writing the same output at
once, and a partial file that a crash left (a power cut) is taken over and replaced by the next run to the same
output, instead of one more being left each time. A run killed with SIGKILL (the OOM killer, `timeout -s KILL`) leaves
none: the long writers (predict.py, export.py) start a watcher that removes their partial file once they are gone.
"""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import IO


class OutputBusyError(OSError):
    """Another live process is writing the same output."""


def partial_path(final: Path, suffix: str = "") -> Path:
    return final.with_name(f".{final.name}.partial{suffix}")


def open_partial(final: Path, suffix: str = "", watched: bool = False) -> IO[str]:
    """The partial file of `final`, truncated and locked, opened for text; raises OSError where it cannot be.
    `watched`: removed if this process is killed before it publishes or discards the file."""
    handle = open(partial_path(final, suffix), "a+", newline="")  # noqa: SIM115 - closed by publish or discard
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise OutputBusyError(f"another process is writing {final}") from None
    except OSError:  # a filesystem without locks (some NFS, Lustre): writing still works, unguarded
        pass
    handle.truncate(0)
    if watched:
        _remove_when_abandoned(Path(handle.name))
    return handle


# Waits for the end of its stdin (every holder of the pipe's other end has ended, however), then removes the partial
# file unless it is gone (published, discarded) or stays locked (another run took it over). The dead writer's lock can
# outlive the pipe by a moment (the kernel releases a dead process's files in no set order): it is waited for, briefly.
WATCHER = """import fcntl, os, sys, time
sys.stdin.buffer.read()
try:
    fd = os.open(sys.argv[1], os.O_WRONLY)
    for _ in range(50):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.1)
    else:
        sys.exit()
    if os.fstat(fd).st_ino == os.stat(sys.argv[1]).st_ino:
        os.unlink(sys.argv[1])
except OSError:
    pass
"""


def _remove_when_abandoned(partial: Path) -> None:
    """A watcher in a session of its own, so that what kills this process's group spares it. This process keeps the
    pipe's write end open until it exits, when the kernel closes it."""
    read, write = os.pipe()
    watcher = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHER, partial], stdin=read, start_new_session=True)
    os.close(read)
    _watching.append((watcher, write))


_watching: list[tuple[subprocess.Popen[bytes], int]] = []  # for the process's life: the watchers, their pipes' ends


def write_text(final: Path, text: str) -> None:
    """`text` as the whole of `final`: a kill at any moment leaves the previous content whole."""
    handle = open_partial(final)
    handle.write(text)
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
    publish(Path(handle.name), final)


def publish(temp: Path, final: Path) -> None:
    """Rename a finished (and fsynced) file into place, with the permissions a plain open() would have given it; the
    whole project's one rename-into-place, checkpoints included."""
    umask = os.umask(0)
    os.umask(umask)
    temp.chmod(0o666 & ~umask)
    os.replace(temp, final)
    directory = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # and the rename itself survives a power cut
    finally:
        os.close(directory)


def discard(handle: IO[str]) -> None:
    handle.close()
    Path(handle.name).unlink(missing_ok=True)


def out_of_space(err: BaseException | None) -> bool:
    """A full disk or quota, also where it only shows as the cause of another error: torch's zip writer answers
    ENOSPC with `RuntimeError: ... unexpected pos`."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        err = err.__cause__ or err.__context__
    return False
