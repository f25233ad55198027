"""Token shards both ways with llm.c, in both of its layouts, byte for byte; nanoGPT's headerless files under the names
nanoGPT gives them. The llm.c files here come from the tests' own restatement of llm.c's format, never from the
project's writer, and the project's shards are read back by a reader written from that format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import run_train

from {{ cookiecutter.package_name }}.tasks.language_model.shards import (
    read_shard,
    write_shard,
)

from .conftest import TINY

# llm.c's dev/data/data_common.py: a model descriptor's magic, version and token type
LLM_C = {"gpt-2": (20240520, 1, np.uint16), "llama-3": (20240801, 7, np.uint32)}


def llm_c_write(path: Path, tokens: np.ndarray, model_desc: str) -> None:
    """What llm.c's `write_datafile` writes: 256 int32 (magic, version, token count, then zeros), then the tokens."""
    magic, version, dtype = LLM_C[model_desc]
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = magic, version, len(tokens)
    path.write_bytes(header.tobytes() + np.asarray(tokens, dtype=dtype).tobytes())


def llm_c_read(path: Path, model_desc: str) -> np.ndarray:
    """What llm.c's readers accept (train_gpt2.py and train_llama3.py check the magic and the version)."""
    magic, version, dtype = LLM_C[model_desc]
    data = path.read_bytes()
    header = np.frombuffer(data[:1024], dtype=np.int32)
    assert header[0] == magic, "magic number mismatch in the data .bin file"
    assert header[1] == version, "unsupported version"
    tokens = np.frombuffer(data[1024:], dtype=dtype)
    assert len(tokens) == header[2], "number of tokens read does not match header"
    return tokens


@pytest.mark.parametrize("model_desc", ["gpt-2", "llama-3"])
def test_llm_c_shards_of_both_layouts_read_back_token_for_token(model_desc: str, tmp_path: Path) -> None:
    top = 50257 if model_desc == "gpt-2" else 128256  # each layout's tokenizer: GPT-2's, Llama 3's
    tokens = np.random.default_rng(0).integers(0, top, 10_000)
    llm_c_write(tmp_path / "fineweb_train_000001.bin", tokens, model_desc)
    read = read_shard(tmp_path / "fineweb_train_000001.bin")
    assert read.dtype == LLM_C[model_desc][2] and np.array_equal(read, tokens)


@pytest.mark.parametrize(("top", "model_desc"), [(50257, "gpt-2"), (128256, "llama-3")])
def test_the_projects_shards_of_each_width_are_what_llm_c_reads(top: int, model_desc: str, tmp_path: Path) -> None:
    tokens = np.random.default_rng(1).integers(0, top, 10_000, dtype=np.uint32)
    tokens[0] = top - 1  # the widest token decides the layout
    write_shard(tmp_path / "train_000000.bin", tokens)
    assert np.array_equal(llm_c_read(tmp_path / "train_000000.bin", model_desc), tokens)


@pytest.mark.parametrize("layout", ["gpt-2", "llama-3", "nanogpt"])
def test_shards_from_llm_c_and_nanogpt_train(layout: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    folder = tmp_path / "shards"
    folder.mkdir()
    for split, size in (("train", 6000), ("val", 1000)):
        tokens = rng.integers(0, 257, size)  # the tiny model's byte vocabulary
        if layout == "nanogpt":
            tokens.astype(np.uint16).tofile(folder / f"{split}.bin")  # nanoGPT's prepare.py: raw uint16, no header
        else:
            llm_c_write(folder / f"tiny_{split}_000000.bin", tokens, layout)
    result = run_train(
        *TINY, "--data=tokens", f"--data-dir={folder}", "--max-epochs=1", f"--output-dir={tmp_path / 'run'}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
