"""--data streaming for the language model: prepare_data.py tokenizes a text folder (as --data text does) and writes
its sequences of --context + 1 tokens into LitData chunks; made_by.json names the tokenizer's hash and the context, so
a run with another tokenizer or context is refused before it trains on tokens it would misread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning_gpu_engine import (
    ConfigError,
    StreamedItems,
    chunks_output,
    parse_chunk_bytes,
    write_chunks,
)
from torch import Tensor
from torch.utils.data import Dataset

from .config import PrepareOptions
from .tokenizer import Tokenizer, load_tokenizer

TASK_NAME = "language-model"


def sequence_item(window: np.ndarray) -> dict[str, Any]:
    return {"tokens": window}


def prepare(opts: PrepareOptions) -> dict[str, int]:
    from .shards import split_documents, text_files

    tokenizer = load_tokenizer("tokenizer", opts.tokenizer)
    folder = Path(opts.data_dir)
    with chunks_output(opts.output) as output:  # a bad --output answers before the text is tokenized
        streams = split_documents(folder, text_files(folder), tokenizer, opts.val_fraction)
        dtype = np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.uint32  # half the bytes for GPT-2's vocabulary
        step = opts.context
        # the windows PackedSequences reads from a --data text stream: every context tokens, context + 1 long
        splits = {
            split: [tokens[k * step : k * step + step + 1].astype(dtype) for k in range((len(tokens) - 1) // step)]
            for split, tokens in streams.items()
        }
        for split, windows in splits.items():
            if not windows:
                raise ConfigError("context", f"the {split} split holds no sequence of {step + 1} tokens; lower it")
        made_by = {"task": TASK_NAME, "tokenizer": tokenizer.digest, "tokenizer_name": tokenizer.name, "context": step}
        write_chunks(sequence_item, splits, output, made_by, opts.num_workers, parse_chunk_bytes(opts.chunk_bytes))
    return {split: len(windows) for split, windows in splits.items()}


def check_chunks(made_by: dict[str, Any], data_dir: str, tokenizer: Tokenizer, context: int) -> None:
    """The chunks' tokens are ids of the tokenizer that made them, in sequences of the context they were cut for."""
    if made_by["tokenizer"] != tokenizer.digest:
        raise ConfigError(
            "tokenizer",
            f"the chunks at {data_dir} were made with {made_by['tokenizer_name']} (hash {made_by['tokenizer']}), "
            f"not this {tokenizer.name} (hash {tokenizer.digest}): give the tokenizer prepare_data.py was given",
        )
    if made_by["context"] != context:
        raise ConfigError(
            "context", f"the chunks at {data_dir} hold sequences for --context {made_by['context']}, not {context}"
        )


class StreamedSequences(Dataset[tuple[Tensor, Tensor]]):
    """A split's sequences from chunks, as PackedSequences gives them: inputs, and targets one token later."""

    def __init__(self, items: StreamedItems) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        window = torch.from_numpy(np.asarray(self.items[index]["tokens"]).astype(np.int64))
        return window[:-1], window[1:]
