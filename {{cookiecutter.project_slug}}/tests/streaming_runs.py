"""What the --data streaming tests of both tasks share: an S3 server on 127.0.0.1, prepare_data.py, and train.py
stopped mid-epoch (SIGTERM or kill -9 to its process groups) on one device, two DDP ranks or two NODE_RANK "nodes",
then resumed with --resume last.

The S3 server is moto's server mode, a real HTTP endpoint: boto3 and LitData reach it through AWS_ENDPOINT_URL, as
they reach MinIO or any S3-compatible store, and nothing of either library is replaced.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, TIMEOUT, Launch, finish, free_port, kill_at_pause, run_script, wait
from lightning_gpu_engine.testing import RANKS_SCRIPT, validations

BUCKET = "streaming-tests"  # S3 bucket names have at least 3 characters
TASK = "from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK\n"
LAYOUTS = {
    "one device": ["--devices=1"],
    "ddp": ["--accelerator=cpu", "--devices=2", "--strategy=ddp"],
    "nodes": ["--accelerator=cpu", "--devices=1", "--num-nodes=2", "--strategy=ddp"],
}
# The layouts are the engine's (StreamedItems, its loaders): the language model's suite stops and resumes in each, the
# image task's on one device, which proves its own items (decoded images) resume exactly
EVERY_LAYOUT = [pytest.param(name, marks=[] if name == "one device" else pytest.mark.multiprocess) for name in LAYOUTS]
COUNTS = ("batches", "samples", "tokens", "time")  # what a resumed process counts from its own start
PAUSE = 6  # the kill -9 comes after this step's checkpoint: mid-way through the second epoch in every layout


def start_s3_server(
    on_request: Callable[[str], object] = lambda line: None,
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """moto's server on 127.0.0.1, in a session of its own: the process, and the AWS variables that point at it.
    `on_request`: given each line of its request log ('"PUT /bucket/key HTTP/1.1" 200') once it has answered it."""
    # port 0: the server binds a free port itself and names it, so no other server can take it in between
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert server.stderr is not None
    port = ""
    for line in server.stderr:  # werkzeug's "* Running on http://127.0.0.1:PORT", within its first lines
        found = re.search(r"Running on http://127\.0\.0\.1:(\d+)", line)
        if found:
            port = found.group(1)
            break
    assert port, "the moto server did not start"
    log = server.stderr
    threading.Thread(target=lambda: [on_request(line) for line in log], daemon=True).start()  # the pipe never fills
    return server, {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def stop_s3_server(server: subprocess.Popen[str]) -> None:
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()


@pytest.fixture(scope="module", name="s3_bucket")
def s3_server_bucket() -> Iterator[str]:
    """s3://BUCKET on a moto server of this module's own, the AWS variables pointing every run started here at it."""
    server, endpoint = start_s3_server()
    before = {name: os.environ.get(name) for name in endpoint}
    os.environ.update(endpoint)
    try:
        import boto3

        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield f"s3://{BUCKET}"
    finally:
        stop_s3_server(server)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def prepare(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = run_script("prepare_data.py", *args, "--num-workers=0", env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done


def cut_upload(launch: Launch, how: str, args: list[str]) -> None:
    """prepare_data.py ARGS writing to s3://cut/chunks on a server of its own, which is killed, or stopped (SIGSTOP: it
    takes connections and never answers), once its log shows the first chunk's upload: one line naming the endpoint
    and the object, exit 2, within the bound that line states. Stopped, over chunks published there before: their
    made_by.json is gone once the server answers again, so the new chunks, half uploaded, are not taken for data.
    (LitData's own uploads stayed silent for as long as they were left, 151 s and more.)"""
    armed, cut = threading.Event(), threading.Event()
    chunk_put = re.compile(r'"PUT /cut/chunks/train/chunk-[^ ]*\.bin HTTP')

    def on_request(line: str) -> None:
        if armed.is_set() and chunk_put.search(line):
            cut.set()

    server, aws = start_s3_server(on_request)
    try:
        import boto3

        boto3.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL"], **credentials(aws)).create_bucket(Bucket="cut")
        output = ["--output=s3://cut/chunks", "--num-workers=0"]
        if how == "stall":
            prepare(*args, "--output=s3://cut/chunks", env=aws)
        armed.set()
        writer = launch([sys.executable, str(ROOT / "prepare_data.py"), *args, *output], env=aws)
        assert cut.wait(TIMEOUT), wait(writer)[-3000:]
        os.killpg(server.pid, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        since = time.monotonic()
        said = wait(writer)
        took = time.monotonic() - since
        errors = [line for line in said.splitlines() if line.startswith("error: ")]
        assert writer.returncode == 2 and len(errors) == 1 and "Traceback" not in said, said[-3000:]
        endpoint = aws["AWS_ENDPOINT_URL"]
        assert errors[0].startswith(f"error: --output: cannot reach the S3 endpoint {endpoint} to write s3://cut/")
        assert errors[0].endswith("so nothing there is used: run prepare_data.py again once it answers"), errors
        bound = re.search(r" tries over at most (\d+) s\)", errors[0])
        assert bound, f"the error line states no bound: {errors[0]}"
        assert took < int(bound[1]), f"{took:.0f} s from the {how} to the end, past the {bound[1]} s bound it states"
        if how == "stall":
            assert f"note: streaming: no answer from {endpoint} for 10 s, writing s3://cut/chunks/" in said, said
            os.killpg(server.pid, signal.SIGCONT)
            listed = boto3.client("s3", endpoint_url=endpoint, **credentials(aws)).list_objects_v2(Bucket="cut")
            keys = [item["Key"] for item in listed.get("Contents", [])]
            assert "chunks/train/index.json" not in keys and "chunks/made_by.json" not in keys, keys
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGCONT)
            stop_s3_server(server)


def credentials(aws: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": aws["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": aws["AWS_SECRET_ACCESS_KEY"],
        "region_name": aws["AWS_DEFAULT_REGION"],
    }


def start(launch: Launch, layout: str, args: list[str], dump: Path, pause: int = 0) -> list[subprocess.Popen[str]]:
    """train.py's task through the engine's RANKS_SCRIPT, every rank's results dumped: one process group, or one per
    NODE_RANK "node"."""
    dump.mkdir(parents=True, exist_ok=True)
    (dump / "task.py").write_text(TASK)
    command = [sys.executable, str(RANKS_SCRIPT), str(dump / "task.py"), str(dump), str(pause), *args, *LAYOUTS[layout]]
    if layout != "nodes":
        return [launch(command)]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    return [launch(command, env={**env, "NODE_RANK": rank}) for rank in ("0", "1")]


def read_until(process: subprocess.Popen[str], wanted: str) -> str:
    """What a launched process printed up to the first line holding `wanted`; one that never prints it fails the
    test with its output."""
    watchdog = threading.Timer(TIMEOUT, os.killpg, (process.pid, signal.SIGKILL))  # a hang fails instead of blocking
    watchdog.start()
    lines = []
    for line in process.stdout or []:
        lines.append(line)
        if wanted in line:
            break
    watchdog.cancel()
    said = "".join(lines)
    assert wanted in said, said[-3000:] + wait(process)[-3000:]
    return said


def sigterm_after_first_step(groups: list[subprocess.Popen[str]]) -> str:
    """SIGTERM to every process group once rank 0 has printed its first step; what rank 0 printed."""
    first = groups[0]
    watchdog = threading.Timer(TIMEOUT, os.killpg, (first.pid, signal.SIGKILL))  # a hang fails instead of blocking
    watchdog.start()
    lines = []
    for line in first.stdout or []:
        lines.append(line)
        if " batch " in line and " step " in line:
            break
    watchdog.cancel()
    for group in groups:
        os.killpg(group.pid, signal.SIGTERM)
    said = "".join(lines) + wait(first)
    for group in groups[1:]:
        wait(group)
    assert first.returncode == 128 + signal.SIGTERM, said[-3000:]
    return said


def stop_and_resume(launch: Launch, layout: str, how: str, args: list[str], tmp: Path) -> dict[str, Any]:
    """The run stopped mid-epoch by `how` (sigterm, kill) and resumed: rank 0's weights and metrics at the end."""
    out = tmp / f"{layout}-{how}".replace(" ", "-")
    args = [*args, f"--output-dir={out}"]
    if how == "sigterm":
        sigterm_after_first_step(start(launch, layout, args, out.with_suffix(".stopped")))
    else:
        every = f"--checkpoint-every={PAUSE}steps"
        groups = start(launch, layout, [*args, every], out.with_suffix(".killed"), PAUSE)
        kill_at_pause(groups[0], PAUSE)
        for group in groups[1:]:
            os.killpg(group.pid, signal.SIGKILL)
            wait(group)
    saved = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    mid_epoch = not saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["is_last_batch"]
    assert saved["global_step"] > 0 and mid_epoch, f"{how} did not stop {layout} mid-epoch: {saved['global_step']}"
    for group in start(launch, layout, [*args, "--resume=last"], out.with_suffix(".resumed")):
        finish(group)
    return {**torch.load(out.with_suffix(".resumed") / "rank0.pt", weights_only=False), "validations": validations(out)}


def uninterrupted(launch: Launch, layout: str, args: list[str], tmp: Path) -> dict[str, Any]:
    out = tmp / f"{layout}-whole".replace(" ", "-")
    for group in start(launch, layout, [*args, f"--output-dir={out}"], out.with_suffix(".dump")):
        finish(group)
    return {**torch.load(out.with_suffix(".dump") / "rank0.pt", weights_only=False), "validations": validations(out)}


def learnt(metrics: dict[str, float]) -> dict[str, float]:
    """The epoch's metrics and learning rates, without the speed and the counts of this process's own steps."""
    return {k: v for k, v in metrics.items() if not k.endswith("_per_sec") and k.split("/")[-1] not in COUNTS}


def assert_same_run(got: dict[str, Any], want: dict[str, Any], what: str) -> None:
    assert got["global_step"] == want["global_step"], what
    for name, weight in want["params"].items():
        assert torch.equal(got["params"][name], weight), f"{what}: {name}"
    assert learnt(got["metrics"]) == learnt(want["metrics"]), what
    assert got["validations"] == want["validations"], what


def assert_trains_as_its_source(tiny: list[str], runs: dict[str, list[str]], tmp: Path) -> None:
    """train.py once per entry of `runs` (the source's data flags first, then the chunks'): the same summary line and
    bit-identical weights."""
    summaries, weights = {}, {}
    for name, data in runs.items():
        done = run_script("train.py", *tiny, *data, "--max-epochs=1", f"--output-dir={tmp / name}")
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        summaries[name] = done.stdout.strip().splitlines()[-1].split("train throughput=")[0]
        last = torch.load(tmp / name / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        weights[name] = last["state_dict"]
    source, *streamed = runs
    for name in streamed:
        assert summaries[name] == summaries[source], name
        for key, weight in weights[source].items():
            assert torch.equal(weights[name][key], weight), f"{name}: {key}"
