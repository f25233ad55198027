"""The output directory: usable before anything starts, and used by one run at a time.

Two runs writing to one directory would overwrite each other's `last.ckpt` and `config.yaml` without a word. A run
that starts where another left a checkpoint (`last.ckpt` or SLURM's `hpc_ckpt_N.ckpt`) must say `--resume` (continue
it) or get another `--output-dir`; two runs at once are kept apart by a lock that the operating system drops when its
process ends, however it ends. Only the job's global rank 0 takes the lock: every node has a first process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, NoReturn

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.tools.files import out_of_space

ORPHAN_WAIT = 30.0  # seconds a killed run's leftover processes may hold the lock before a restart gives up


def last_path(output_dir: str | Path) -> Path:
    """The checkpoint every run keeps up to date (after each epoch, every --checkpoint-every, on a stop signal)."""
    return Path(output_dir) / "checkpoints" / "last.ckpt"


def check_resume_named(cfg: Config) -> None:
    """A --resume path, or 'last', that names nothing: told before torch loads; what is there is read after it."""
    if cfg.resume in (None, "auto"):
        return
    named = last_path(cfg.output_dir) if cfg.resume == "last" else Path(cfg.resume)
    if not named.exists():
        raise ConfigError("resume", f"no checkpoint at {named}; 'auto' starts afresh when there is none")


def check_output_dir(cfg: Config) -> None:
    """Refuse a path that is a file, lies under a file, or cannot be written, and one holding another run."""
    path = Path(cfg.output_dir)
    check_writable_dir(path, "output_dir")
    last = last_path(path)
    preempted = sorted(path.glob("hpc_ckpt_*.ckpt"))  # SLURM's pre-emption saves: Lightning resumes them unasked
    if cfg.resume is None and (preempted or last.exists()):
        held, how = (preempted[-1], "--resume auto") if preempted else (last, "--resume last")
        raise ConfigError(
            "output_dir", f"{path} already holds a run ({held}); continue it with {how}, or give another --output-dir"
        )


def check_writable_dir(path: Path, option: str) -> None:
    """A folder that is, or can be made, and written in; else ConfigError for --`option`."""
    if path.exists() and not path.is_dir():
        raise ConfigError(option, f"{path} is a file, not a directory; give a directory path")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(option, f"{path} cannot be created: {existing} is a file")
    try:  # a real write, since permissions do not tell a read-only filesystem (or root's view) apart
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".write-test-")
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(option, f"cannot write in {existing} ({err.strerror}); choose a writable one") from None


def _no_space(path: Path, created: list[Path], err: OSError) -> NoReturn:
    """A full disk at the run's first writes: one line, and the folders this run made are removed again."""
    if not out_of_space(err):
        raise err
    (path / ".lock").unlink(missing_ok=True)
    for folder in created:
        with contextlib.suppress(OSError):
            folder.rmdir()
    raise ConfigError("output_dir", f"no space left in {path}; free some, or give another --output-dir")


def take_lock(lock: BinaryIO, path: Path) -> None:
    """The lock, or ConfigError naming the run that holds it. A run killed with kill -9 (the OOM killer) can leave
    processes it started (loader workers on macOS, or from a forkserver) holding it for seconds: those are waited for,
    a bounded time, and never named as the run."""
    waited = 0.0
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().decode(errors="replace").strip()
            if holder.isdigit() and not alive(int(holder)) and waited < ORPHAN_WAIT:
                if waited == 0:
                    print(f"note: the run that used {path} (pid {holder}) has ended; waiting for what it started")
                time.sleep(0.2)
                waited += 0.2
                continue
            if holder.isdigit() and not alive(int(holder)):
                message = (
                    f"the run that used {path} (pid {holder}) has ended, but processes it started still hold its lock "
                    f"after {ORPHAN_WAIT:.0f} s; end them (fuser -k {path / '.lock'}), or give another --output-dir"
                )
            else:
                who = f"pid {holder or 'unknown'}"
                message = f"another run ({who}) is using {path}; wait for it, or give another --output-dir"
            raise ConfigError("output_dir", message) from None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    if not sys.platform.startswith("linux"):
        return True
    try:  # a zombie has ended: in a container whose init never reaps orphans, a killed run stays one for good
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:  # it ended meanwhile
        return False


@contextmanager
def hold_output_dir(cfg: Config, is_global_zero: bool) -> Iterator[None]:
    """Holds `<output-dir>/.lock` for the run (global rank 0 only: the other ranks belong to the same run)."""
    if not is_global_zero:
        yield
        return
    path = Path(cfg.output_dir)
    created = [p for p in (path, *path.parents) if not p.exists()]  # deepest first, for removal
    try:  # the run's first writes: a full disk shows here, before anything else is started
        path.mkdir(parents=True, exist_ok=True)
        lock = open(path / ".lock", "a+b", buffering=0)  # noqa: SIM115 - unbuffered: a failed write stays failed
    except OSError as err:
        _no_space(path, created, err)
    with lock:
        try:
            take_lock(lock, path)
        except OSError as err:  # Lustre without -o flock, some NFS: the run works, only unguarded
            warnings.warn(
                f"cannot lock {path / '.lock'} on this filesystem ({err.strerror}): nothing keeps a second run out "
                "of this --output-dir while this one runs",
                stacklevel=2,
            )
        try:
            lock.truncate(0)
            lock.write(str(os.getpid()).encode())
        except OSError as err:
            _no_space(path, created, err)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock, fcntl.LOCK_UN)
