"""A token cache that was cut, replaced or damaged after it was written is not trained on: with the same files and
tokenizer, a shard whose size or checksum is not the one its manifest recorded is noticed, said in one line, and made
again."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_train

from .conftest import TINY
from .test_text_data import write_corpus


@pytest.mark.parametrize("damage", ["cut", "zeroed at the same size"])
def test_a_damaged_shard_is_noticed_and_the_cache_made_again(damage: str, tmp_path: Path) -> None:
    write_corpus(tmp_path / "texts", documents=200)
    args = [*TINY, "--data=text", f"--data-dir={tmp_path / 'texts'}", "--max-steps=2"]
    first = run_train(*args, f"--output-dir={tmp_path / 'a'}")
    assert first.returncode == 0, first.stderr[-3000:]
    (train,) = (tmp_path / "texts" / ".tokens").glob("*/train_000000.bin")
    whole = train.read_bytes()
    with open(train, "r+b") as shard:
        if damage == "cut":  # what a full disk or a copy that stopped half-way leaves
            shard.truncate(1024 + 2 * 500)
        else:  # a bad block, or a copy that wrote zeros: llm.c's header intact, the tokens not
            shard.seek(1024)
            shard.write(bytes(len(whole) - 1024))
    again = run_train(*args, f"--output-dir={tmp_path / 'b'}")
    assert again.returncode == 0, again.stderr[-3000:]
    said = f"note: {train} is not the file it was written as (cut, replaced or damaged): tokenizing again"
    assert said in again.stdout
    assert "tokenized 2 files" in again.stdout
    assert train.read_bytes() == whole
    reused = run_train(*args, f"--output-dir={tmp_path / 'c'}")
    assert reused.returncode == 0 and "tokenized" not in reused.stdout, "a whole cache is still reused"
