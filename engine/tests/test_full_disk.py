"""Real full disks (small tmpfs mounts, as a cluster's scratch or a quota fills up) and filesystems without locks: one
line, no traceback, and nothing lost or half-written. The mounts need root; elsewhere these tests skip, saying so."""

from __future__ import annotations

import errno
import fcntl
import math
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lightning_gpu_engine import read_checkpoint, train

from .conftest import run_toy

WIDE = ["--hidden=512"]  # a checkpoint of a few MiB, far more than the logs written beside it


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        folder = tmp_path / f"disk{len(mounted)}"
        folder.mkdir()
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
        )
        if result.returncode:
            pytest.skip(f"a small disk needs a tmpfs mount, which this user cannot make: {result.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_disk_full_before_the_run_starts_is_one_line_exit_2_and_leaves_nothing(
    my_task: Path, tiny_args: list[str], small_disk: Callable[[int], Path]
) -> None:
    disk = small_disk(2**20)
    with open(disk / "fill", "wb") as fill, pytest.raises(OSError, match="No space left"):
        while True:
            fill.write(b"\0" * 65536)
            fill.flush()
    result = run_toy(my_task, *tiny_args, *WIDE, f"--output-dir={disk / 'runs' / 'a'}")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"error: --output-dir: no space left in {disk / 'runs' / 'a'}; free some, or give another --output-dir"
    ]
    assert sorted(p.name for p in disk.iterdir()) == ["fill"], "the folders it made are gone again"


@pytest.mark.parametrize(
    "formats",
    [[], ["--checkpoint-format=sharded"], ["--checkpoint-format=sharded", "--async-save"]],
    ids=["file", "sharded", "sharded-async"],
)
def test_a_disk_that_fills_during_a_save_is_one_line_and_keeps_the_last_good_checkpoint(
    formats: list[str], my_task: Path, tiny_args: list[str], tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    """torch's zip writer answers ENOSPC with `RuntimeError: ... unexpected pos`, which once printed 60 lines; a
    sharded save, with torch.distributed.checkpoint's CheckpointException around it, and left its folder behind."""
    measured = run_toy(my_task, *tiny_args, *WIDE, *formats, "--max-steps=1", f"--output-dir={tmp_path / 'measure'}")
    assert measured.returncode == 0, measured.stderr[-3000:]
    size = sum(p.stat().st_size for p in (tmp_path / "measure" / "checkpoints").rglob("*") if p.is_file())
    disk = small_disk(math.ceil(1.6 * size / 4096) * 4096)  # room for one checkpoint, not for its replacement too
    result = run_toy(my_task, *tiny_args, *WIDE, *formats, "--checkpoint-every=1steps", f"--output-dir={disk / 'run'}")
    folder = disk / "run" / "checkpoints"
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in result.stderr and len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith(f"error: --output-dir: no space left in {folder} to save last.ckpt")
    assert read_checkpoint(folder / "last.ckpt")["global_step"] >= 1
    kept = {"last.ckpt", os.readlink(folder / "last.ckpt")} if formats else {"last.ckpt"}
    assert {p.name for p in folder.iterdir()} == kept, "no partial file or folder left"


def test_a_filesystem_without_locks_warns_and_trains(
    toy: ModuleType, tiny_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lustre mounted without `flock`, some NFS: flock raises ENOLCK or EOPNOTSUPP, not BlockingIOError."""
    real_flock = fcntl.flock

    def unsupported(fd: Any, operation: int) -> None:
        if operation & fcntl.LOCK_EX:
            raise OSError(errno.ENOLCK, "No locks available")
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", unsupported)
    with pytest.warns(UserWarning, match=r"cannot lock .*\.lock on this filesystem \(No locks available\)"):
        metrics = train(toy.TASK, [*tiny_args, "--fast-dev-run"])
    assert "test/loss" in metrics
