"""--keep-last K: the K newest saves of last.ckpt stay beside it as step-<N>.ckpt, on a disk and in a bucket, with a
file and with a sharded checkpoint; --resume from the oldest of them trains on, and ends where the run ended before,
bit for bit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lightning_gpu_engine import read_checkpoint
from lightning_gpu_engine.testing.script_runs import first_difference

from .conftest import ENDS_ALIKE, TOY, run_toy
from .object_store import Bucket, fresh_bucket, moto_server  # noqa: F401  # the fixtures
from .test_object_storage import FORMATS

# 3 epochs of 4 steps, a save every 2 steps: the 3 newest are those of steps 8, 10 and 12
ARGS = [*TOY, "--max-epochs=3", "--checkpoint-every=2steps", "--keep-last=3"]
KEPT = ["step-000008.ckpt", "step-000010.ckpt", "step-000012.ckpt"]


def assert_same_end(want: dict[str, Any], got: dict[str, Any], what: str) -> None:
    for part in ENDS_ALIKE:
        where = first_difference(want[part], got[part])
        assert where is None, f"{what}: {part}{where or ''} differs from the end of the run it was kept by"


@pytest.mark.parametrize("formats", FORMATS.values(), ids=FORMATS.keys())
def test_keep_last_3_on_a_disk_leaves_the_3_newest_and_the_oldest_trains_on_to_the_same_end(
    formats: list[str], my_task: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    done = run_toy(my_task, *ARGS, *formats, f"--output-dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = out / "checkpoints"
    assert sorted(p.name for p in folder.glob("step-*")) == KEPT
    for name in KEPT:
        assert read_checkpoint(folder / name)["global_step"] == int(name[5:11])
    linked = [p for p in folder.iterdir() if p.is_symlink()]  # sharded: one folder for each name, none left over
    assert sorted(f for f in os.listdir(folder) if f.startswith(".")) == sorted(os.readlink(p) for p in linked)
    if not formats:  # a hard link to last.ckpt: no bytes of its own
        assert (folder / KEPT[-1]).stat().st_ino == (folder / "last.ckpt").stat().st_ino
    want = read_checkpoint(folder / "last.ckpt")

    oldest = folder / KEPT[0]
    resumed = run_toy(my_task, *ARGS, *formats, f"--output-dir={out}", f"--resume={oldest}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Restoring states from the checkpoint path at {oldest}" in resumed.stderr
    assert sorted(p.name for p in folder.glob("step-*")) == KEPT
    assert_same_end(want, read_checkpoint(folder / "last.ckpt"), f"resumed from {KEPT[0]}")


@pytest.mark.parametrize("formats", FORMATS.values(), ids=FORMATS.keys())
def test_keep_last_3_in_a_bucket_leaves_the_3_newest_and_the_oldest_trains_on_from_there(
    formats: list[str], my_task: Path, bucket: Bucket, tmp_path: Path
) -> None:
    run = f"--output-dir={bucket.url}/run"
    done = run_toy(my_task, *ARGS, *formats, run, env=bucket.env(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    names = bucket.keys("run/checkpoints")
    assert [k for k in names if k.startswith("step-")] == KEPT
    folders = {k.split("/")[0] for k in names if k.startswith(".")}
    if formats:  # one folder of parts for each kept checkpoint, for last.ckpt and the best, and no other
        named = sorted(f.split(".shards-")[0] for f in folders if not f.startswith(".best-"))
        assert named == [".last.ckpt", *(f".{name}" for name in KEPT)] and len(folders) == 5, names
    else:
        assert not folders, names
    for name in KEPT:
        fetched = bucket.fetch("run", f"checkpoints/{name}", tmp_path / "fetched" / name)
        assert read_checkpoint(fetched)["global_step"] == int(name[5:11])
    want = read_checkpoint(bucket.fetch("run", "checkpoints/last.ckpt", tmp_path / "want" / "last.ckpt"))

    node = tmp_path / "node-b"  # nothing local: the oldest is read from the bucket
    (node / "tmp").mkdir(parents=True)
    oldest = f"--resume={bucket.url}/run/checkpoints/{KEPT[0]}"
    resumed = run_toy(my_task, *ARGS, *formats, run, oldest, env=bucket.env(node / "tmp"), cwd=node)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [k for k in bucket.keys("run/checkpoints") if k.startswith("step-")] == KEPT
    got = read_checkpoint(bucket.fetch("run", "checkpoints/last.ckpt", tmp_path / "got" / "last.ckpt"))
    assert_same_end(want, got, f"resumed from {KEPT[0]} in the bucket")
