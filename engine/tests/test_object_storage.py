"""`--output-dir s3://bucket/prefix`: a run that needs no shared disk. Stopped by SIGTERM to its process group and
requeued on "another node" (a fresh working folder and $TMPDIR, nothing local), it resumes from the bucket and ends
with the checkpoints of the same run on a local disk, bit for bit; on one device and on 2 DDP ranks, with a file and
with a sharded checkpoint. The bucket is a moto server's on 127.0.0.1 (object_store.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from lightning_gpu_engine import read_checkpoint
from lightning_gpu_engine.testing.script_runs import first_difference

from .conftest import ENDS_ALIKE, TOY, run_toy, signalling_task
from .object_store import Bucket, fresh_bucket, moto_server  # noqa: F401  # the fixtures

FORMATS = {"file": [], "sharded": ["--checkpoint-format=sharded"]}
STEP_DONE = "on_train_batch_end(self, trainer, *args)"


def assert_ends_alike(want: Path, got: Path, what: str, validations: bool = True) -> None:
    """The output folder `got` ended as `want`: each of ENDS_ALIKE in its last checkpoint (file or sharded) bit for
    bit, and, unless `validations` is False, the same validation.jsonl."""
    want_last, got_last = (read_checkpoint(out / "checkpoints" / "last.ckpt") for out in (want, got))
    for part in ENDS_ALIKE:
        where = first_difference(want_last[part], got_last[part])
        assert where is None, f"{what}: {part}{where or ''} differs from the uninterrupted run on a local disk"
    if validations:
        seen = [(out / "validation.jsonl").read_text() for out in (want, got)]
        assert seen[1] == seen[0], f"{what}: the validations differ from the uninterrupted run on a local disk"


def from_the_bucket(bucket: Bucket, prefix: str, into: Path) -> Path:
    """The run's last checkpoint and validations, as they are in the bucket."""
    bucket.fetch(prefix, "checkpoints/last.ckpt", into / "checkpoints" / "last.ckpt")
    bucket.fetch(prefix, "validation.jsonl", into / "validation.jsonl")
    return into


def stop_and_requeue(my_task: Path, bucket: Bucket, args: list[str], tmp_path: Path, stops: list[int]) -> Path:
    """The run to the bucket, stopped by a SIGTERM to its group at each of `stops` (global steps) and each time
    started again on a "node" of its own (a fresh working folder and $TMPDIR): --resume auto the first time, as a
    requeued job does, --resume last after. What the bucket ends with, fetched."""
    out = f"--output-dir={bucket.url}/run"
    for n, step in enumerate([*stops, None]):
        node = tmp_path / f"node-{n}"
        (node / "tmp").mkdir(parents=True)
        resume = [] if n == 0 else ["--resume=auto" if n == 1 else "--resume=last"]
        env = bucket.env(node / "tmp")
        if step is None:
            done = run_toy(my_task, *args, out, *resume, env=env, cwd=node)
            assert done.returncode == 0, done.stderr[-3000:]
        else:
            condition = f"trainer.global_rank == 0 and trainer.global_step == {step}"
            script = signalling_task(node / "stopping.py", my_task, STEP_DONE, condition)
            done = run_toy(script, *args, out, *resume, env=env, cwd=node, new_session=True)
            assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
            assert "Traceback" not in done.stderr
            assert f"saved {bucket.url}/run/checkpoints/last.ckpt; continue with --resume last" in done.stderr
            assert {"config.yaml", "checkpoints/last.ckpt"} <= set(bucket.keys("run")), bucket.keys("run")
        assert not any((node / "tmp").iterdir()), "the staging folder is cleaned once everything is uploaded"
        assert [p.name for p in node.iterdir()] in (["tmp"], ["tmp", "stopping.py"], ["stopping.py", "tmp"])
    return from_the_bucket(bucket, "run", tmp_path / "from-bucket")


@pytest.mark.parametrize("formats", FORMATS.values(), ids=FORMATS.keys())
def test_a_run_to_s3_stopped_and_requeued_elsewhere_ends_as_the_same_run_on_a_local_disk(
    formats: list[str], my_task: Path, bucket: Bucket, tmp_path: Path
) -> None:
    args = [*TOY, "--max-epochs=3", "--checkpoint-every=off", *formats]  # 4 steps an epoch, 12 in all
    local = run_toy(my_task, *args, f"--output-dir={tmp_path / 'local'}")
    assert local.returncode == 0, local.stderr[-3000:]
    got = stop_and_requeue(my_task, bucket, args, tmp_path, stops=[3, 6])  # mid-epoch, twice
    assert_ends_alike(tmp_path / "local", got, "one device")
    assert read_checkpoint(got / "checkpoints" / "last.ckpt")["global_step"] == 12
    config = bucket.store("run").read("config.yaml")
    assert config is not None and f"output_dir: {bucket.url}/run\n" in config[0].decode()
    logs = [k for k in bucket.keys("run") if k.startswith("logs/")]
    assert logs == ["logs/version_0/hparams.yaml", "logs/version_0/metrics.csv"], logs
    assert ".lock" not in bucket.keys("run"), "the run's lease is let go at its end"


@pytest.mark.multiprocess
@pytest.mark.parametrize("formats", [[], [*FORMATS["sharded"], "--async-save"]], ids=["file", "sharded-async"])
def test_2_ddp_ranks_to_s3_stopped_and_requeued_elsewhere_end_as_on_a_local_disk(
    formats: list[str], my_task: Path, bucket: Bucket, tmp_path: Path
) -> None:
    args = [*TOY, "--devices=2", "--strategy=ddp", "--max-epochs=3", "--checkpoint-every=off", *formats]  # 2 a epoch
    local = run_toy(my_task, *args, f"--output-dir={tmp_path / 'local'}")
    assert local.returncode == 0, local.stderr[-3000:]
    got = stop_and_requeue(my_task, bucket, args, tmp_path, stops=[3])
    assert_ends_alike(tmp_path / "local", got, "2 DDP ranks")
    parts = [k.split("/")[1] for k in bucket.keys("run/checkpoints") if k.startswith(".last.ckpt.shards-")]
    assert sorted(parts) == ([".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"] if formats else []), parts
