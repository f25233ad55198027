"""Outputs that appear whole or not at all: written under a fixed hidden name beside the final one, then renamed; the
project's one way to put a file or a folder in place, and to check beforehand that it can be.

The name is fixed (`.<name>.partial<suffix>`), not random: a lock on it keeps two runs from writing the same output at
once, and a partial file or folder that a crash left (a power cut) is taken over and replaced by the next run to the
same output, instead of one more being left each time. A run killed with SIGKILL (the OOM killer, `timeout -s KILL`)
leaves none: a `watched` writer starts a watcher that removes its partial output once it is gone.

Every entry point opens its output with `open_output` or `PartialFolder` before its work, so a folder where a file
is wanted, a missing or read-only place, or another run writing there is one line (ConfigError) at once, never a
traceback after minutes. Whatever mode the writer made its files with (safetensors makes 0600 ones), a published
output has the permissions a plain open() would have given it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path
from typing import IO

from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.tools.watcher import remove_when_abandoned


class OutputBusyError(OSError):
    """Another live process is writing the same output."""


def partial_path(final: Path, suffix: str = "") -> Path:
    return final.with_name(f".{final.name}.partial{suffix}")


def open_partial(final: Path, suffix: str = "", watched: bool = False, wait: bool = False) -> IO[str]:
    """The partial file of `final`, truncated and locked, opened for text; raises OSError where it cannot be.
    `watched`: removed if this process is killed before it publishes or discards the file. `wait`: another writer
    of it is a partner (a sweep's workers each write its report), waited for rather than refused."""
    path = partial_path(final, suffix)
    unwatch = remove_when_abandoned(path) if watched else None
    while True:
        handle = open(path, "a+", newline="")  # noqa: SIM115 - closed by commit or discard
        try:
            _lock(handle.fileno(), final, wait)
        except OutputBusyError:
            handle.close()
            if unwatch is not None:
                unwatch()
            raise
        if _still_at(handle.fileno(), path):
            break
        handle.close()  # the writer waited for published it or removed it meanwhile: the next partial is a new file
    handle.truncate(0)
    return handle


def _still_at(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _lock(fd: int, final: Path, wait: bool = False) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise OutputBusyError(f"another process is writing {final}") from None
    except OSError:  # a filesystem without locks (some NFS, Lustre): writing still works, unguarded
        pass


def _refused(option: str, final: Path, err: OSError) -> ConfigError:
    if isinstance(err, OutputBusyError):
        return ConfigError(option, f"{err}; wait for it to finish, or give another --{option.replace('_', '-')}")
    return ConfigError(option, f"cannot write in {final.parent} ({err.strerror or err}); give a writable place")


def check_place(final: Path, option: str, folder: bool = False) -> Path:
    """`final`, absolute, if an output can be put there: its folder exists, and it is not a folder (a file output)
    or not a file (a folder output); ConfigError for --`option` otherwise. Writing is tried by the opening."""
    final = Path(os.path.abspath(final))
    if not final.parent.is_dir():
        what = "is a file" if final.parent.exists() else "does not exist"
        raise ConfigError(option, f"the folder {final.parent} {what}; create it or give a path in an existing one")
    if final.is_dir() and not folder:
        raise ConfigError(option, f"{final} is a folder; give the name of a file to write")
    if final.exists() and folder and not final.is_dir():
        raise ConfigError(option, f"{final} is a file; give the name of a folder to write")
    return final


def open_output(final: str | Path, option: str, suffix: str = "", watched: bool = True, wait: bool = False) -> IO[str]:
    """The partial file of the output `final`, checked (`check_place`) and opened before any work; ConfigError for
    --`option` where it cannot be. `commit(handle, final)` once it is written; `discard(handle)` otherwise."""
    place = check_place(Path(final), option)
    try:
        return open_partial(place, suffix, watched, wait)
    except OSError as err:
        raise _refused(option, place, err) from None


def check_output(final: str | Path, option: str, wait: bool = False) -> None:
    """The output `final` can be written (as `open_output` checks it) by a writer that writes it later, or often:
    bench.py's rows, a sweep's report. ConfigError for --`option` otherwise."""
    discard(open_output(final, option, watched=False, wait=wait))


class PartialFolder:
    """A folder output's hidden partial folder, `.<name>.partial`, locked, empty, and watched: write into `path`,
    then `publish()`. Used as a context manager, it is discarded on leaving unpublished (an error, a stop). `replace`:
    an existing output is replaced whole; otherwise it is refused."""

    def __init__(self, final: str | Path, option: str, replace: bool = False, watched: bool = True) -> None:
        self.final = check_place(Path(final), option, folder=True)
        if self.final.exists() and not replace:
            raise ConfigError(option, f"{self.final} exists; give a folder that does not exist yet")
        self.path = partial_path(self.final)
        unwatch = remove_when_abandoned(self.path) if watched else None
        try:
            self.path.mkdir(exist_ok=True)
            self.fd = os.open(self.path, os.O_RDONLY)  # a lock on the folder itself: what the watcher waits for
            try:
                _lock(self.fd, self.final)
            except OutputBusyError:
                os.close(self.fd)
                raise
            for leftover in self.path.iterdir():  # a crashed run's: taken over
                shutil.rmtree(leftover) if leftover.is_dir() and not leftover.is_symlink() else leftover.unlink()
        except OSError as err:
            if unwatch is not None:
                unwatch()
            raise _refused(option, self.final, err) from None
        self.done = False

    def __enter__(self) -> PartialFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.done:
            shutil.rmtree(self.path, ignore_errors=True)
            self._release()

    def publish(self) -> None:
        publish(self.path, self.final)
        self._release()

    def _release(self) -> None:
        self.done = True
        os.close(self.fd)


def write_text(final: Path, text: str, option: str | None = None, wait: bool = False) -> None:
    """`text` as the whole of `final`: a kill at any moment leaves the previous content whole. `option`: a place that
    cannot take it is ConfigError for that flag, not OSError."""
    if option is not None:
        handle = open_output(final, option, watched=False, wait=wait)
    else:
        handle = open_partial(final, wait=wait)
    try:
        handle.write(text)
        commit(handle, final)
    except BaseException:
        discard(handle)
        raise


def commit(handle: IO[str], final: str | Path) -> None:
    """The partial file `handle` (open_output's, open_partial's), written, as `final`: on disk, then renamed there.
    Its lock is let go only after the rename: a writer let in before it would truncate what is being published."""
    handle.flush()
    os.fsync(handle.fileno())
    try:
        publish(Path(handle.name), Path(final))
    finally:
        handle.close()


def publish(temp: Path, final: Path) -> None:
    """Rename a finished (and fsynced) file or folder into place, with the permissions a plain open() or mkdir()
    would have given it, every file inside too; the whole project's one rename-into-place, checkpoints included. A
    folder replaces the one at `final` whole (the old is moved aside, then removed)."""
    umask = os.umask(0)
    os.umask(umask)
    if temp.is_dir():
        for root, folders, files in os.walk(temp):
            for name in files:
                Path(root, name).chmod(0o666 & ~umask)
            for name in folders:
                Path(root, name).chmod(0o777 & ~umask)
        temp.chmod(0o777 & ~umask)
    else:
        temp.chmod(0o666 & ~umask)
    old = final.with_name(f".{final.name}.replaced")
    if temp.is_dir() and final.is_dir() and not final.is_symlink():  # no rename over a folder that has files
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.replace(temp, final)
    shutil.rmtree(old, ignore_errors=True)
    directory = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # and the rename itself survives a power cut
    finally:
        os.close(directory)


def discard(handle: IO[str]) -> None:
    try:
        Path(handle.name).unlink(missing_ok=True)  # before the lock goes, as in commit
    finally:
        handle.close()


def out_of_space(err: BaseException | None) -> bool:
    """A full disk or quota, also where it only shows as the cause of another error: torch's zip writer answers
    ENOSPC with `RuntimeError: ... unexpected pos`, and torch.distributed.checkpoint gathers each rank's failure in a
    CheckpointException."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if type(err).__name__ == "CheckpointException":  # torch's, not imported here: {rank: (error, its trace)}
            return any(out_of_space(failure[0]) for failure in err.failures.values())  # type: ignore[attr-defined]
        err = err.__cause__ or err.__context__
    return False
