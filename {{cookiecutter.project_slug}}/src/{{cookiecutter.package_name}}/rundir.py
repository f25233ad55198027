"""The output directory: usable before anything starts, and used by one run at a time.

Two runs writing to one directory would overwrite each other's `last.ckpt` and `config.yaml` without a word. A run
that starts where another left a checkpoint must say `--resume` (continue it) or get another `--output-dir`; two runs
at once are kept apart by a lock that the operating system drops when its process ends, however it ends.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .cli import fail
from .config import Config, ConfigError


def check_output_dir(cfg: Config) -> None:
    """Refuse a path that is a file, lies under a file, or cannot be written, and one holding another run."""
    path = Path(cfg.output_dir)
    if path.exists() and not path.is_dir():
        raise ConfigError("output_dir", f"{path} is a file, not a directory; give a directory path")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError("output_dir", f"{path} cannot be created: {existing} is a file")
    try:  # a real write, since permissions do not tell a read-only filesystem (or root's view) apart
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".write-test-")
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError("output_dir", f"cannot write in {existing} ({err.strerror}); choose a writable one") from None
    last = path / "checkpoints" / "last.ckpt"
    if cfg.resume is None and last.exists():
        raise ConfigError(
            "output_dir",
            f"{path} already holds a run ({last}); continue it with --resume last, or give another --output-dir",
        )


@contextmanager
def hold_output_dir(cfg: Config, is_global_zero: bool) -> Iterator[None]:
    """Holds `<output-dir>/.lock` for the run (rank 0 only: the other ranks belong to the same run)."""
    if not is_global_zero:
        yield
        return
    path = Path(cfg.output_dir)
    path.mkdir(parents=True, exist_ok=True)
    with open(path / ".lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            fail(f"--output-dir: another run (pid {holder}) is using {path}; wait for it, or give another --output-dir")
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
