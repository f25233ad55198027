"""--data streaming: prepare_data.py tokenizes a text folder into LitData chunks, locally or on an S3 server (moto, on
127.0.0.1), and train.py trains from them as from the folder, resuming bit for bit after SIGTERM or kill -9; chunks of
another tokenizer or context are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Launch, run_train
from streaming_runs import (
    EVERY_LAYOUT,
    assert_same_run,
    assert_trains_as_its_source,
    cut_upload,
    prepare,
    s3_server_bucket,  # noqa: F401  # the fixture s3_bucket
    stop_and_resume,
    uninterrupted,
)

from {{ cookiecutter.package_name }}.tasks.language_model.tokenizer import train_bpe

from .test_text_data import write_corpus

TINY = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--model=tiny", "--context=32"]
TINY += ["--batch-size=8", "--num-workers=0", "--logger=csv", "--log-every-n-steps=1", "--no-compile"]


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("texts") / "data"
    write_corpus(folder, documents=16)  # 80 training sequences of 33 tokens: 10 steps an epoch, 5 on two ranks
    return folder


@pytest.fixture(scope="module")
def chunks(texts: Path) -> Path:
    output = texts.parent / "chunks"
    done = prepare(f"--data-dir={texts}", f"--output={output}", "--context=32")
    assert " train, " in done.stdout and f"sequences to {output}" in done.stdout
    return output


def test_chunks_on_disk_and_on_s3_train_exactly_as_the_text_folder_they_were_made_from(
    texts: Path, chunks: Path, s3_bucket: str, tmp_path: Path
) -> None:
    prepare(f"--data-dir={texts}", f"--output={s3_bucket}/texts", "--context=32")
    runs = {
        "text": ["--data=text", f"--data-dir={texts}"],
        "local": ["--data=streaming", f"--data-dir={chunks}"],
        "s3": ["--data=streaming", f"--data-dir={s3_bucket}/texts", f"--cache-dir={tmp_path / 'cache'}"],
    }
    assert_trains_as_its_source(TINY, runs, tmp_path)


@pytest.mark.parametrize("layout", EVERY_LAYOUT)
def test_sigterm_or_kill_9_mid_epoch_then_resume_last_ends_as_the_uninterrupted_run(
    layout: str, chunks: Path, launch: Launch, tmp_path: Path
) -> None:
    args = [*TINY, "--data=streaming", f"--data-dir={chunks}", "--max-epochs=2"]
    whole = uninterrupted(launch, layout, args, tmp_path)
    for how in ("sigterm", "kill"):
        assert_same_run(stop_and_resume(launch, layout, how, args, tmp_path), whole, f"{layout}, {how}")


def test_chunks_of_another_tokenizer_context_or_task_are_refused_in_one_line_naming_the_flag(
    texts: Path, chunks: Path, tmp_path: Path
) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    train_bpe([path.read_text() for path in texts.iterdir() if path.is_file()], 300, tokenizer)
    other = tmp_path / "other-task"
    other.mkdir()
    (other / "made_by.json").write_text(json.dumps({"task": "image-classification", "classes": ["a", "b"]}))
    refused = {
        ("--data-dir", str(chunks), f"--tokenizer={tokenizer}"): "were made with bytes (hash ",
        ("--data-dir", str(chunks), "--context=16"): "hold sequences for --context 32, not 16",
        ("--data-dir", str(other)): "were made for image-classification, not language-model",
    }
    for (flag, data_dir, *more), said in refused.items():
        done = run_train(*TINY, "--data=streaming", f"{flag}={data_dir}", *more, f"--output-dir={tmp_path / 'o'}")
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (done.stdout + done.stderr)[-3000:]
        named = more[0].split("=")[0] if more else flag
        assert lines[0].startswith(f"error: {named}: ") and said in lines[0], lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("how", ["kill", "stall"])
def test_an_s3_server_killed_or_stalled_mid_upload_ends_prepare_data_in_one_line_within_the_bound(
    how: str, texts: Path, launch: Launch
) -> None:
    """One sequence a chunk: 80 uploads of the training split, the cut after the first."""
    cut_upload(launch, how, [f"--data-dir={texts}", "--context=32", "--chunk-bytes=100B"])
