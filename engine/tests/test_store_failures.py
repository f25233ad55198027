"""An object-storage --output-dir that fails: the bucket missing, the credentials refused, the endpoint down at the
start, at a resume or during a save, stalled during a save or during a stop's save, and a second run at the same URL.
Each is one line naming the URL and what to do, keeps the checkpoint the bucket had whole, and never hangs: the run
ends within --store-timeout of the store's silence (2 s here), plus what the machine's load adds."""

from __future__ import annotations

import io
import signal
import socket
import time
from pathlib import Path

import pytest
import torch

from lightning_gpu_engine.testing.processes import wait_until

from .conftest import TOY, run_toy
from .object_store import KEYS, Bucket, fresh_bucket, moto_server, start_s3_server, stop_s3_server  # noqa: F401
from .test_stops import Run, runs  # noqa: F401  # runs: the fixture that reaps what a test started

TIMEOUT = ["--store-timeout=2"]
LONG = [*TOY, "--max-epochs=1000", *TIMEOUT]  # stopped by the store's failure, or by the test
SLACK = 60  # seconds a loaded machine may add to a bound: the test fails a hang, not a slow CPU


def error_line(stderr: str) -> str:
    """The run's one `error:` line, with no traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def staged_nothing(tmp: Path) -> bool:
    return not (tmp / "lightning-gpu-engine-staging").exists()


def test_a_missing_bucket_is_one_line_at_the_start(my_task: Path, bucket: Bucket, tmp_path: Path) -> None:
    url = f"s3://{bucket.name}-missing/run"
    done = run_toy(my_task, *LONG, f"--output-dir={url}", env=bucket.env(tmp_path))
    assert done.returncode == 2
    line = error_line(done.stderr)
    assert line.startswith(f"error: --output-dir: cannot list {url}/checkpoints/: the bucket {bucket.name}-missing ")
    assert "does not exist at http://127.0.0.1:" in line and "create it, or give another --output-dir" in line
    assert staged_nothing(tmp_path) and not list(my_task.parent.glob("s3*"))


def test_refused_credentials_are_one_line_at_the_start(my_task: Path, tmp_path: Path) -> None:
    server, port = start_s3_server({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})  # moto checks every request's keys
    try:
        env = {**KEYS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "TMPDIR": str(tmp_path)}
        done = run_toy(my_task, *LONG, "--output-dir=s3://any-bucket/run", env=env)
    finally:
        stop_s3_server(server)
    assert done.returncode == 2
    line = error_line(done.stderr)
    assert f"http://127.0.0.1:{port} refused the credentials (InvalidAccessKeyId); check AWS_ACCESS_KEY_ID" in line
    assert staged_nothing(tmp_path)


def test_an_endpoint_down_at_the_start_is_one_line_within_the_bound(
    my_task: Path, bucket: Bucket, tmp_path: Path
) -> None:
    bucket.relay.down()
    began = time.monotonic()
    done = run_toy(my_task, *LONG, f"--output-dir={bucket.url}/run", env=bucket.env(tmp_path))
    assert done.returncode == 2 and time.monotonic() - began < 2 + SLACK
    line = error_line(done.stderr)
    assert f"cannot list {bucket.url}/run/checkpoints/: no answer from http://127.0.0.1:{bucket.relay.port}" in line
    assert "check that it is up and reachable; nothing was written" in line
    assert staged_nothing(tmp_path)


def test_an_endpoint_down_at_a_resume_is_one_line_and_the_bucket_keeps_its_checkpoint(
    my_task: Path, bucket: Bucket, tmp_path: Path
) -> None:
    run = [*TOY, "--max-epochs=1", *TIMEOUT, f"--output-dir={bucket.url}/run"]
    assert run_toy(my_task, *run, env=bucket.env(tmp_path)).returncode == 0
    before = bucket.store("run").read("checkpoints/last.ckpt")  # its bytes, its version and its age
    bucket.relay.down()
    done = run_toy(my_task, *run, "--max-epochs=2", "--resume=last", env=bucket.env(tmp_path))
    assert done.returncode == 2
    assert f"no answer from http://127.0.0.1:{bucket.relay.port}" in error_line(done.stderr)
    after = bucket.store("run").read("checkpoints/last.ckpt")
    assert before is not None and after is not None and after[:2] == before[:2]
    assert staged_nothing(tmp_path)


def bucket_step(bucket: Bucket) -> int:
    """The step of the bucket's last.ckpt, read directly (0: none yet)."""
    found = bucket.store("run").read("checkpoints/last.ckpt")
    if found is None:
        return 0
    return int(torch.load(io.BytesIO(found[0]), map_location="cpu", weights_only=True)["global_step"])


@pytest.mark.parametrize("failure", ["down", "stall"])
def test_an_endpoint_that_fails_during_a_save_is_one_line_and_the_bucket_keeps_the_checkpoint_before(
    failure: str,
    my_task: Path,
    bucket: Bucket,
    runs: list[Run],  # noqa: F811  # the fixture imported above
    tmp_path: Path,
) -> None:
    run = Run(my_task, *LONG, "--checkpoint-every=2steps", f"--output-dir={bucket.url}/run", env=bucket.env(tmp_path))
    runs.append(run)
    kept = wait_until(lambda: bucket_step(bucket), run.process, "a checkpoint in the bucket")
    getattr(bucket.relay, failure)()
    began = time.monotonic()
    code, output = run.finish()
    assert code == 1 and time.monotonic() - began < 2 + SLACK, output[-3000:]
    line = error_line(output)
    assert line.startswith("error: --output-dir: cannot ") and f" {bucket.url}/run/" in line, line  # checkpoint or log
    said = " for 2 s (--store-timeout)" if failure == "stall" else ""  # down: refused, or retried until the bound
    assert f"no answer from http://127.0.0.1:{bucket.relay.port}{said}" in line, line
    assert line.endswith("once the store answers, --resume last continues from the store's last.ckpt"), line
    bucket.relay.up()
    assert bucket_step(bucket) >= kept and bucket_step(bucket) % 2 == 0  # a whole checkpoint, as it was before


def test_a_sigterm_while_the_upload_stalls_saves_on_the_node_and_exits_within_the_bound(
    my_task: Path,
    bucket: Bucket,
    runs: list[Run],  # noqa: F811  # the fixture imported above
    tmp_path: Path,
) -> None:
    args = [*LONG, "--samples=4000", "--checkpoint-every=off", f"--output-dir={bucket.url}/run"]
    run = Run(my_task, *args, env=bucket.env(tmp_path))
    runs.append(run)
    run.wait_for("epoch 1/1000  batch 1/")  # training, and no save before the stop's: an epoch is 500 steps
    bucket.relay.stall()
    run.signal_group(signal.SIGTERM)
    began = time.monotonic()
    code, output = run.finish()
    assert code == 128 + signal.SIGTERM and time.monotonic() - began < 2 + SLACK, output[-3000:]
    line = error_line(output)
    assert f"cannot upload {bucket.url}/run/checkpoints/last.ckpt: no answer" in line, line
    local = Path(line.split("this run's newer ones are on this node in ")[1].split(": once")[0])
    assert torch.load(local, map_location="cpu", weights_only=True)["global_step"] >= 1  # saved what it could
    bucket.relay.up()
    assert bucket_step(bucket) == 0  # no checkpoint half-written there


def test_a_second_run_at_the_same_url_is_refused_and_a_killed_runs_lease_is_taken_over(
    my_task: Path,
    bucket: Bucket,
    runs: list[Run],  # noqa: F811  # the fixture imported above
    tmp_path: Path,
) -> None:
    """Each on a "node" of its own (its $TMPDIR): only the lease in the bucket keeps them apart."""
    out = f"--output-dir={bucket.url}/run"
    first = Run(my_task, *LONG, out, env=bucket.env(tmp_path / "a"))
    runs.append(first)
    first.wait_for("epoch 1/1000  batch 1/")
    second = run_toy(my_task, *LONG, out, "--resume=auto", env=bucket.env(tmp_path / "b"))
    assert second.returncode == 2
    assert error_line(second.stderr) == (
        f"error: --output-dir: another run ({socket.gethostname()}, pid {first.process.pid}) is using "
        f"{bucket.url}/run (its lease {bucket.url}/run/.lock is renewed as it runs); wait for it, or give another "
        "--output-dir"
    )
    first.kill()  # kill -9: its lease stays in the bucket
    first.finish()
    assert ".lock" in bucket.keys("run")
    one_more = f"--max-steps={bucket_step(bucket) + 1}"  # the first's epochs went on while the second was refused
    third = run_toy(my_task, *LONG, one_more, out, "--resume=auto", env=bucket.env(tmp_path / "c"))
    assert third.returncode == 0, third.stderr[-3000:]
    assert ".lock" not in bucket.keys("run")
