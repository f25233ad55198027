"""Your own text and tokens: a folder of .txt/.jsonl files, a BPE tokenizer learnt from it, the llm.c shards made from
them (reused, rebuilt when the files or the tokenizer change), and shards brought from llm.c or nanoGPT."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import run_script, run_train

from {{ cookiecutter.package_name }}.tasks.language_model.data import PackedSequences
from {{ cookiecutter.package_name }}.tasks.language_model.shards import (
    GPT2,
    in_validation,
    read_shard,
)
from {{ cookiecutter.package_name }}.tasks.language_model.synthetic import (
    MarkovLanguage,
)
from {{ cookiecutter.package_name }}.tasks.language_model.tokenizer import Tokenizer

from .conftest import TINY

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "while",
    "the",
    "dog",
    "ran",
    "after",
    "a",
    "red",
    "ball",
    "in",
    "the",
    "park",
    "near",
    "our",
    "old",
    "house",
]


def write_corpus(folder: Path, documents: int = 60) -> list[str]:
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 40)) + "." for _ in range(documents)]
    folder.mkdir()
    (folder / "story.txt").write_text(texts[0])
    (folder / "more.jsonl").write_text(
        "".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts[1:]))
    )
    return texts


def decoded(tokenizer: Tokenizer, shard: Path) -> list[str]:
    """A shard's documents, as text."""
    tokens = read_shard(shard)
    return [
        tokenizer.decode(doc.tolist()) for doc in np.split(tokens, np.flatnonzero(tokens == tokenizer.eot) + 1)[:-1]
    ]


def test_a_bpe_tokenizer_learnt_here_trains_on_the_folder_and_its_shards_are_llm_c_files(tmp_path: Path) -> None:
    texts = write_corpus(tmp_path / "texts")
    tokenizer_file = tmp_path / "tokenizer.json"
    made = run_script(
        "train_tokenizer.py", f"--data-dir={tmp_path / 'texts'}", "--vocab-size=300", f"--output={tokenizer_file}"
    )
    assert made.returncode == 0, made.stderr[-3000:]
    tokenizer = Tokenizer(tokenizer_file.read_text())
    assert tokenizer.vocab_size == 300 and tokenizer.decode(tokenizer.encode(texts[3])) == texts[3]
    args = [*TINY, "--data=text", f"--data-dir={tmp_path / 'texts'}", f"--tokenizer={tokenizer_file}", "--max-epochs=1"]
    first = run_train(*args, f"--output-dir={tmp_path / 'a'}")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "tokenized 2 files" in first.stdout
    config = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert config["val_fraction"] == 0.05 and "train_tokens" not in config, "what text data reads, and only that"
    shards = tmp_path / "texts" / ".tokens" / tokenizer.digest
    train, val = shards / "train_000000.bin", shards / "val_000000.bin"
    header = np.fromfile(train, dtype=np.int32, count=256)
    assert (header[0], header[1]) == (GPT2, 1) and train.stat().st_size == 1024 + 2 * header[2]
    # every document once and whole, on the side its hash chose, in the order of the sorted files
    in_order = [*texts[1:], texts[0]]  # more.jsonl's lines, then story.txt
    for shard, side in ((train, False), (val, True)):
        assert decoded(tokenizer, shard) == [t for t in in_order if in_validation(t, 0.05) == side]
    # the same files and tokenizer: the shards are reused; a changed file: made again
    stamp = train.stat().st_mtime_ns
    again = run_train(*args, f"--output-dir={tmp_path / 'b'}")
    assert again.returncode == 0 and "tokenized" not in again.stdout and train.stat().st_mtime_ns == stamp
    (tmp_path / "texts" / "story.txt").write_text(texts[0] + " And one more sentence.")
    changed = run_train(*args, f"--output-dir={tmp_path / 'c'}")
    assert changed.returncode == 0 and "tokenized 2 files" in changed.stdout
    # a resume on other data is refused: the epoch's order follows the number of sequences
    (tmp_path / "texts" / "extra.txt").write_text(" ".join(WORDS * 40))
    resumed = run_train(*args, f"--output-dir={tmp_path / 'c'}", "--resume=last", "--max-epochs=2")
    assert resumed.returncode == 2 and resumed.stderr.startswith("error: --data-dir: the checkpoint was trained on")


def test_validation_takes_whole_documents_from_every_source_whatever_the_file_order(tmp_path: Path) -> None:
    """Files named by source sort one source last: the tail of the tokens would validate on that source alone."""
    folder = tmp_path / "texts"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for source in ("news", "code"):
        lines = [json.dumps({"text": f"{source} {i}: " + " ".join(rng.choice(WORDS, 30))}) for i in range(40)]
        (folder / f"{source}.jsonl").write_text("\n".join(lines) + "\n")
    args = [*TINY, "--data=text", f"--data-dir={folder}", "--val-fraction=0.2", "--max-epochs=1"]
    tokenizer = Tokenizer("bytes")
    validated = []
    for run in ("first", "renamed"):
        if run == "renamed":
            (folder / "news.jsonl").rename(folder / "zz-news.jsonl")  # news now sorts last
        result = run_train(*args, f"--output-dir={tmp_path / run}")
        assert result.returncode == 0, result.stderr[-3000:]
        (val,) = (folder / ".tokens").glob("*/val_000000.bin")
        validated.append(sorted(decoded(tokenizer, val)))
    assert validated[0] == validated[1]  # the same documents, whatever the files' order
    sources = {text.split(" ", 1)[0] for text in validated[0]}
    assert sources == {"news", "code"} and 8 <= len(validated[0]) <= 24  # about 20% of 80, from both


def test_one_long_text_file_validates_on_its_tail_and_says_so(tmp_path: Path) -> None:
    """nanoGPT's Shakespeare: one document; validation then takes the last --val-fraction of its tokens."""
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "input.txt").write_text(" ".join(WORDS * 200))
    args = [*TINY, "--data=text", f"--data-dir={tmp_path / 'texts'}", "--max-epochs=1"]
    result = run_train(*args, f"--output-dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "holds too few documents (1) to pick whole ones for validation: it takes the last 0.05" in result.stdout
    (train,) = (tmp_path / "texts" / ".tokens").glob("*/train_000000.bin")
    val = train.with_name("val_000000.bin")
    whole = np.concatenate([read_shard(train), read_shard(val)])
    assert len(read_shard(val)) == len(whole) - int(len(whole) * 0.95)


def test_packed_sequences_are_consecutive_windows_with_targets_one_token_later() -> None:
    stream = np.arange(100, dtype=np.uint16)
    data = PackedSequences([stream, stream[:30]], context=8)
    assert len(data) == 99 // 8 + 29 // 8
    x, y = data[12]
    assert x.tolist() == list(range(8)) and y.tolist() == list(range(1, 9))  # the second stream's first window
    assert data[11][0].tolist() == list(range(88, 96))


def test_the_synthetic_floor_is_the_entropy_of_what_it_samples() -> None:
    language = MarkovLanguage(vocab_size=257, eot=256, seed=3)
    tokens = language.sample(400_000, seed=4).astype(np.int64)
    assert tokens[-1] == 256 and len(tokens) >= 400_000
    counts = np.zeros((257, 257))
    np.add.at(counts, (tokens[:-1], tokens[1:]), 1)
    rows = counts / counts.sum(axis=1, keepdims=True).clip(1)
    empirical = -(counts * np.log(np.where(rows > 0, rows, 1))).sum() / counts.sum()
    assert empirical == pytest.approx(language.floor, abs=0.01)
