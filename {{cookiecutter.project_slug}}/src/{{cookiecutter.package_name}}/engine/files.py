"""Outputs that appear whole or not at all: written under a fixed hidden name beside the final one, then renamed.

The name is fixed (`.<name>.partial<suffix>`), not random: a run killed with SIGKILL leaves one such file, which the
next run to the same output takes over and replaces, instead of leaving one more each time. A lock on it keeps two
runs from writing the same output at once.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import IO


class OutputBusyError(OSError):
    """Another live process is writing the same output."""


def partial_path(final: Path, suffix: str = "") -> Path:
    return final.with_name(f".{final.name}.partial{suffix}")


def open_partial(final: Path, suffix: str = "") -> IO[str]:
    """The partial file of `final`, truncated and locked, opened for text; raises OSError where it cannot be."""
    handle = open(partial_path(final, suffix), "a+", newline="")  # noqa: SIM115 - closed by publish or discard
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise OutputBusyError(f"another process is writing {final}") from None
    except OSError:  # a filesystem without locks (some NFS, Lustre): writing still works, unguarded
        pass
    handle.truncate(0)
    return handle


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
