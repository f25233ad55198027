"""The object store behind a URL --output-dir (checkpoint/store.py): S3 through boto3 against a moto server, any other
scheme through fsspec (its in-memory filesystem here). What the run relies on: an object is whole or absent, a
conditional write lets one writer win, and a store that stops answering is given up after --store-timeout."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lightning_gpu_engine.checkpoint.store import Conflict, Store, StoreError, Unsupported
from lightning_gpu_engine.checkpoint.store_fsspec import FsspecStore
from lightning_gpu_engine.checkpoint.store_s3 import S3Store

from .conftest import TOY, run_toy
from .object_store import KEYS, Bucket, fresh_bucket, moto_server  # noqa: F401  # the fixtures

_memory = itertools.count()


@pytest.fixture(params=["s3", "memory"])
def store(request: pytest.FixtureRequest, bucket: Bucket) -> Iterator[Store]:
    yield bucket.store("run") if request.param == "s3" else FsspecStore(f"memory://runs-{next(_memory)}/run", 5)


def test_a_store_puts_lists_reads_copies_and_deletes_by_paths_under_its_url(store: Store, tmp_path: Path) -> None:
    local = tmp_path / "last.ckpt"
    local.write_bytes(b"weights" * 1000)
    store.upload(local, "checkpoints/last.ckpt")
    store.copy("checkpoints/last.ckpt", "checkpoints/step-000002.ckpt")
    store.write("config.yaml", b"lr: 0.1\n")
    listed = store.listing()
    assert sorted(listed) == ["checkpoints/last.ckpt", "checkpoints/step-000002.ckpt", "config.yaml"]
    assert listed["checkpoints/step-000002.ckpt"].size == 7000
    assert list(store.listing("checkpoints/step-")) == ["checkpoints/step-000002.ckpt"]
    found = store.read("config.yaml")
    assert found is not None and found[0] == b"lr: 0.1\n"
    store.download("checkpoints/step-000002.ckpt", tmp_path / "got" / "step.ckpt")
    assert (tmp_path / "got" / "step.ckpt").read_bytes() == local.read_bytes()
    assert [p.name for p in (tmp_path / "got").iterdir()] == ["step.ckpt"]  # no partial download left
    store.delete(["checkpoints/last.ckpt", "config.yaml"])
    assert list(store.listing()) == ["checkpoints/step-000002.ckpt"] and store.read("config.yaml") is None


def test_only_one_conditional_writer_wins_where_the_store_has_conditional_writes(store: Store) -> None:
    if not store.guarded:  # an fsspec filesystem: the run says in one line that the location is unguarded
        with pytest.raises(Unsupported):
            store.write(".lock", b"a", absent=True)
        return
    version = store.write(".lock", b"a", absent=True)
    with pytest.raises(Conflict):
        store.write(".lock", b"b", absent=True)
    renewed = store.write(".lock", b"c", replacing=version)
    with pytest.raises(Conflict):  # a take-over from the version before the renewal loses
        store.write(".lock", b"d", replacing=version)
    with pytest.raises(Conflict):
        store.delete([".lock"], replacing=version)
    store.delete([".lock"], replacing=renewed)
    assert store.read(".lock") is None


def test_a_stalled_store_is_given_up_after_the_timeout_and_a_stopped_one_at_once(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**KEYS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{bucket.relay.port}"}.items():
        monkeypatch.setenv(name, value)
    store = S3Store(f"{bucket.url}/run", timeout=1)
    store.write("config.yaml", b"lr: 0.1\n")
    bucket.relay.stall()
    began = time.monotonic()
    with pytest.raises(StoreError, match=rf"^cannot read {bucket.url}/run/config.yaml: no answer from .* for 1 s"):
        store.read("config.yaml")
    assert time.monotonic() - began < 10  # 1 s, and a loaded machine's delays
    bucket.relay.up()
    bucket.relay.down()
    with pytest.raises(StoreError, match=r"no answer from http://127.0.0.1:\d+ "):
        store.read("config.yaml")


def test_a_url_fsspec_knows_is_used_and_said_to_be_unguarded(my_task: Path, tmp_path: Path) -> None:
    """memory:// lives in the run's own process: the run writes there and ends as any other."""
    done = run_toy(my_task, *TOY, "--max-epochs=1", "--output-dir=memory://runs/run", env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "memory://runs/run is unguarded: memory:// has no conditional writes" in done.stderr
    assert "checkpoints: memory://runs/run/checkpoints" in done.stdout
    assert not (tmp_path / "lightning-gpu-engine-staging").exists()


def test_a_url_no_filesystem_knows_is_one_line(my_task: Path, tmp_path: Path) -> None:
    done = run_toy(my_task, *TOY, "--output-dir=nosuch://runs/run", env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --output-dir: no filesystem here knows nosuch://; give s3://bucket/prefix or a local folder"
    ]
    assert not list(tmp_path.iterdir()) and not list(my_task.parent.glob("nosuch*"))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--keep-last=-1"], "error: --keep-last: must be 0 (last.ckpt alone) or a positive count, got -1"),
        (["--store-timeout=0"], "error: --store-timeout: must be a positive number of seconds, got 0.0"),
        (
            ["--resume=s3://runs/run/checkpoints/last.ckpt"],
            "error: --resume: a URL is read where --output-dir is one too; download the checkpoint first",
        ),
    ],
)
def test_bad_values_of_the_new_options_are_one_line_before_anything_is_written(
    args: list[str], said: str, my_task: Path, tmp_path: Path
) -> None:
    done = run_toy(my_task, *TOY, *args, f"--output-dir={tmp_path / 'run'}", env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [said]
    assert not list(tmp_path.iterdir())
