"""--data streaming: prepare_data.py writes an image folder into LitData chunks, locally or on an S3 server (moto, on
127.0.0.1), and train.py trains from them as from the folder, resuming bit for bit after SIGTERM or kill -9."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import boto3
import pytest
import torch
from conftest import ROOT, Launch, run_train, wait
from streaming_runs import (
    BUCKET,
    LAYOUTS,
    assert_same_run,
    assert_trains_as_its_source,
    cut_upload,
    prepare,
    read_until,
    s3_server_bucket,  # noqa: F401  # the fixture s3_bucket
    start,
    start_s3_server,
    stop_and_resume,
    stop_s3_server,
    uninterrupted,
)

import prepare_data
import train

from .test_folder_resume import write_photos

TINY = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--image-size=16", "--batch-size=8"]
TINY += ["--num-workers=0", "--logger=csv", "--log-every-n-steps=1", "--no-compile"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    write_photos(root / "half")
    for folder in ("train", "val"):  # the images twice over: 64 training images, 8 steps an epoch on one device
        shutil.copytree(root / "half" / folder, root / "data" / folder)
    for image in (root / "half" / "train").rglob("*.*"):
        shutil.copy(image, root / "data" / "train" / image.parent.name / f"copy-{image.name}")
    return root / "data"


@pytest.fixture(scope="module")
def chunks(photos: Path) -> Path:
    output = photos.parent / "chunks"
    done = prepare(f"--data-dir={photos}", f"--output={output}")
    assert "wrote 64 train, 4 val images" in done.stdout
    return output


def test_chunks_on_disk_and_on_s3_train_exactly_as_the_folder_they_were_made_from(
    photos: Path, chunks: Path, s3_bucket: str, tmp_path: Path
) -> None:
    prepare(f"--data-dir={photos}", f"--output={s3_bucket}/photos")
    runs = {
        "folder": ["--data=folder", f"--data-dir={photos}"],
        "local": ["--data=streaming", f"--data-dir={chunks}"],
        "s3": ["--data=streaming", f"--data-dir={s3_bucket}/photos", f"--cache-dir={tmp_path / 'cache'}"],
    }
    assert_trains_as_its_source(TINY, runs, tmp_path)
    assert list((tmp_path / "cache").rglob("index.json")), "the index was not cached in --cache-dir"


@pytest.mark.parametrize("layout", ["one device"])  # the other layouts: tests/language_model/test_streaming.py
def test_sigterm_or_kill_9_mid_epoch_then_resume_last_ends_as_the_uninterrupted_run(
    layout: str, chunks: Path, launch: Launch, tmp_path: Path
) -> None:
    args = [*TINY, "--data=streaming", f"--data-dir={chunks}", "--max-epochs=2"]
    whole = uninterrupted(launch, layout, args, tmp_path)
    assert whole["global_step"] == 16  # 64 images in batches of 8, two epochs
    for how in ("sigterm", "kill"):
        assert_same_run(stop_and_resume(launch, layout, how, args, tmp_path), whole, f"{layout}, {how}")


def one_line(done: object) -> str:
    stdout, stderr, code = (getattr(done, name) for name in ("stdout", "stderr", "returncode"))
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (stdout + stderr)[-3000:]
    return str(lines[0])


def test_bad_chunk_locations_and_chunks_of_the_other_task_are_refused_in_one_line(
    chunks: Path, s3_bucket: str, tmp_path: Path
) -> None:
    other = tmp_path / "other-task"
    shutil.copytree(chunks, other)
    made_by = json.loads((other / "made_by.json").read_text())
    (other / "made_by.json").write_text(json.dumps({**made_by, "task": "language-model"}))
    refused = {
        f"s3://no-such-{BUCKET}/photos": "there is no bucket",
        f"{s3_bucket}/nothing-here": f"no chunks at {s3_bucket}/nothing-here",
        str(other): "were made for language-model, not image-classification",
    }
    for data_dir, said in refused.items():
        line = one_line(run_train(*TINY, "--data=streaming", f"--data-dir={data_dir}", f"--output-dir={tmp_path}/o"))
        assert line.startswith("error: --data-dir: ") and said in line, line
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    os.environ["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"  # the discard port: nothing listens
    try:
        line = one_line(run_train(*TINY, "--data=streaming", f"--data-dir={s3_bucket}/x", f"--output-dir={tmp_path}/o"))
    finally:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
    assert "cannot reach the S3 endpoint http://127.0.0.1:9" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_chunk_cut_short_or_deleted_mid_run_ends_it_in_one_line(
    where: str, photos: Path, chunks: Path, s3_bucket: str, launch: Launch, tmp_path: Path
) -> None:
    data_dir = str(tmp_path / "chunks") if where == "local" else f"{s3_bucket}/damaged"
    if where == "local":
        shutil.copytree(chunks, data_dir)
    else:
        prepare(f"--data-dir={photos}", f"--output={data_dir}")
    args = [*TINY, "--data=streaming", f"--data-dir={data_dir}", "--max-epochs=50", f"--output-dir={tmp_path}/o"]
    args.append(f"--num-workers={1 if where == 'local' else 0}")  # the error from a loader worker, and from the run
    args.append(f"--cache-dir={tmp_path / 'cache'}")  # its own: LitData's default is shared on the node
    process = start(launch, "one device", args, tmp_path / "unused")[0]
    lines = []
    for line in process.stdout or []:
        lines.append(line)
        if " batch " in line and " step " in line:  # training is reading the chunks
            break
    if where == "local":
        chunk = next(Path(data_dir, "train").glob("*.bin"))
        os.truncate(chunk, chunk.stat().st_size // 2)
    else:
        boto3.client("s3").delete_object(Bucket=BUCKET, Key="damaged/train/chunk-0-0.bin")
    output = "".join(lines) + wait(process)
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert process.returncode == 2 and len(errors) == 1 and "Traceback" not in output, output[-3000:]
    assert errors[0].startswith("error: --data-dir: ") and "the chunks changed during the run" in errors[0]


UNITLESS = "expected a size with its unit (B, KB, MB, GB, KiB, MiB, GiB)"


@pytest.mark.parametrize(
    ("size", "said"),
    [("20000", UNITLESS), ("0KB", "expected a size of at least 1 byte"), ("64 parsecs", UNITLESS)],
)
def test_a_chunk_size_without_its_unit_or_of_nothing_is_one_line_before_any_image_is_read(
    size: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """LitData's own parse failed after every image was read, and left an empty chunks/train/ behind. A zero is
    refused for the zero, not for a unit it has."""
    output = tmp_path / "chunks"
    with pytest.raises(SystemExit) as exit_info:
        prepare_data.main([f"--data-dir={tmp_path}", f"--output={output}", f"--chunk-bytes={size}"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == f"error: --chunk-bytes: {said}, like 64MB or 512KB; got {size!r}"
    assert list(tmp_path.iterdir()) == []


def test_a_stalled_s3_server_is_said_a_sigterm_saves_and_a_dead_one_ends_even_a_ddp_final_test_in_one_line(
    photos: Path, launch: Launch, tmp_path: Path
) -> None:
    """With a loader worker, as stalled runs were found: one device silent for 101 s, deaf to SIGTERM for 176 s, then
    exit 2 without a save, saying the chunks had changed; two DDP ranks waiting in the final test for good. A server
    of this test's own, since it is stopped and then killed."""
    server, aws = start_s3_server()
    try:
        s3 = {f"aws_{key.lower()}": aws[f"AWS_{key}"] for key in ("ACCESS_KEY_ID", "SECRET_ACCESS_KEY")}
        s3 |= {"endpoint_url": aws["AWS_ENDPOINT_URL"], "region_name": aws["AWS_DEFAULT_REGION"]}
        boto3.client("s3", **s3).create_bucket(Bucket="stalled")
        prepare(f"--data-dir={photos}", "--output=s3://stalled/photos", env=aws)
        args = [*TINY, "--data=streaming", "--data-dir=s3://stalled/photos", "--num-workers=1", "--max-epochs=2"]
        args += [f"--cache-dir={tmp_path / 'cache'}"]
        train = [sys.executable, str(ROOT / "train.py"), *args]

        run = launch([*train, f"--output-dir={tmp_path / 'run'}"], env=aws)
        read_until(run, "  step 1  ")
        os.killpg(server.pid, signal.SIGSTOP)  # it accepts connections and says nothing: the next read waits
        read_until(run, f"note: streaming: no answer from {aws['AWS_ENDPOINT_URL']} for 10 s, reading item ")
        os.killpg(run.pid, signal.SIGTERM)
        said = wait(run)
        assert run.returncode == 128 + signal.SIGTERM, said[-3000:]
        assert f"saved {tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}; continue with --resume last" in said
        os.killpg(server.pid, signal.SIGCONT)
        resumed = launch([*train, f"--output-dir={tmp_path / 'run'}", "--resume=last"], env=aws)
        assert "Traceback" not in wait(resumed) and resumed.returncode == 0
        last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        assert last["global_step"] == 16

        ddp = launch([*train, *LAYOUTS["ddp"], f"--output-dir={tmp_path / 'ddp'}"], env=aws)
        read_until(ddp, "epoch 2/2 done in ")  # training and its last validation read; the final test has not
        stop_s3_server(server)  # refuses every connection from now on
        said = wait(ddp)
        errors = [line for line in said.splitlines() if line.startswith("error: ")]
        assert ddp.returncode != 0 and errors and "Traceback" not in said, said[-3000:]
        unreachable = f"error: --data-dir: cannot reach the S3 endpoint {aws['AWS_ENDPOINT_URL']} "
        assert errors[0].startswith(unreachable), said[-3000:]
        assert errors[0].endswith("the chunks are unchanged: --resume last continues once it answers")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGCONT)
            stop_s3_server(server)


def test_an_s3_server_killed_mid_upload_ends_prepare_data_in_one_line(photos: Path, launch: Launch) -> None:
    """One image a chunk: 64 uploads of the training split, the cut after the first (a stalled server, and the chunks
    published before it: tests/language_model/test_streaming.py)."""
    cut_upload(launch, "kill", [f"--data-dir={photos}", "--chunk-bytes=1B"])


def test_a_cache_dir_that_cannot_be_written_is_one_line_before_anything_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """LitData's index is kept there: a NotADirectoryError or OSError traceback came from inside the run's setup."""
    (tmp_path / "a-file").write_text("")
    chunks = tmp_path / "chunks"  # what the run reads before the index: chunks of this task, as far as it can tell
    chunks.mkdir()
    made_by = {"task": "image-classification", "classes": ["a", "b"], "items": {"train": 8, "val": 8}}
    (chunks / "made_by.json").write_text(json.dumps(made_by))
    cases = {  # --cache-dir (None: unset, with $TMPDIR read-only) and what the line says
        str(tmp_path / "a-file"): f"{tmp_path / 'a-file'} is a file, not a directory; give a directory path",
        "/proc/cache": "cannot write in /proc (",
        None: "unset, so $TMPDIR/litdata: cannot write in /proc (",
    }
    monkeypatch.setenv("TMPDIR", "/proc")
    for cache_dir, said in cases.items():
        flags = [f"--cache-dir={cache_dir}"] if cache_dir else []
        with pytest.raises(SystemExit) as exit_info:
            train.main([*TINY, "--data=streaming", f"--data-dir={chunks}", *flags, f"--output-dir={tmp_path}/o"])
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and err.startswith(f"error: --cache-dir: {said}") and "\n" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "chunks"]
