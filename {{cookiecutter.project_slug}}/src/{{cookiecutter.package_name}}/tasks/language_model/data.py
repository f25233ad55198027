"""The DataModule: token streams (synthetic, a text folder's shards, or your own llm.c shards) packed into sequences of
--context + 1 tokens, documents joined by end-of-text, read through the engine's resumable loaders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning_gpu_engine import StreamedItems, eval_loader, note, read_made_by, train_loader
from torch import Tensor
from torch.utils.data import Dataset

from .shards import read_shard, text_files, text_shards, token_shards
from .streaming import TASK_NAME, StreamedSequences, check_chunks
from .synthetic import MarkovLanguage
from .tokenizer import Tokenizer


class PackedSequences(Dataset[tuple[Tensor, Tensor]]):
    """Non-overlapping windows of context + 1 tokens over the streams (inputs, and targets one token later).

    A stream is an array or the path of a shard; shards are memory-mapped once per process (loader workers receive
    paths, not the tokens)."""

    def __init__(self, streams: list[np.ndarray | Path], context: int) -> None:
        self.streams, self.context = streams, context
        self.opened: dict[int, np.ndarray] = {}
        sizes = [len(s) if isinstance(s, np.ndarray) else len(read_shard(s)) for s in streams]
        self.offsets = np.cumsum([0] + [(size - 1) // context for size in sizes])
        self.tokens = sum(sizes)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        which = int(np.searchsorted(self.offsets, index, side="right")) - 1
        source = self.streams[which]
        if isinstance(source, np.ndarray):
            stream = source
        elif which in self.opened:
            stream = self.opened[which]
        else:
            stream = self.opened[which] = read_shard(source)
        start = (index - int(self.offsets[which])) * self.context
        window = torch.from_numpy(stream[start : start + self.context + 1].astype(np.int64))
        return window[:-1], window[1:]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "opened": {}}


class LanguageDataModule(L.LightningDataModule):
    def __init__(
        self,
        tokenizer: Tokenizer,
        data: str = "synthetic",
        data_dir: str | None = None,
        context: int = 256,
        batch_size: int = 32,
        train_tokens: int = 2_000_000,
        val_fraction: float = 0.05,
        seed: int = 42,
        num_workers: int = 0,
        pin_memory: bool = False,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["tokenizer"])
        self.tokenizer = tokenizer
        self.floor: float | None = None  # synthetic: the entropy floor, the best val/loss possible
        self.splits: dict[str, PackedSequences | StreamedSequences] = {}
        # Checked now, in one line, before any training: a folder without text; shards and their largest token
        self.shards: dict[str, list[Path]] = {}
        self.made_by: dict[str, Any] = {}  # streaming: what prepare_data.py wrote beside the chunks
        if data == "text":
            text_files(Path(data_dir or ""))
        elif data == "tokens":
            self.shards = token_shards(Path(data_dir or ""), tokenizer.vocab_size)
        elif data == "streaming":
            self.made_by = read_made_by(data_dir or "", TASK_NAME, cache_dir)
            check_chunks(self.made_by, data_dir or "", tokenizer, context)

    def prepare_data(self) -> None:  # one process per node: the others read the shards it wrote
        if self.hparams["data"] == "text":
            text_shards(Path(self.hparams["data_dir"]), self.tokenizer, self.hparams["val_fraction"])

    def setup(self, stage: str) -> None:
        if self.splits:
            return
        hp = self.hparams
        streams: dict[str, list[np.ndarray | Path]]
        if hp["data"] == "streaming":
            for split in ("train", "val", "test"):
                chunks = split if split in self.made_by["items"] else "val"
                self.splits[split] = StreamedSequences(StreamedItems(hp["data_dir"], chunks, hp["cache_dir"]))
            return
        if hp["data"] == "synthetic":
            language = MarkovLanguage(self.tokenizer.vocab_size, self.tokenizer.eot, hp["seed"])
            self.floor = language.floor
            sizes = {"train": hp["train_tokens"], "val": hp["train_tokens"] // 20, "test": hp["train_tokens"] // 20}
            # seeds of their own per split, so --train-tokens changes no validation token
            seeds = {"train": hp["seed"] + 1, "val": hp["seed"] + 2, "test": hp["seed"] + 3}
            streams = {s: [language.sample(max(size, hp["context"] + 1), seeds[s])] for s, size in sizes.items()}
            note(f"synthetic language: entropy floor {self.floor:.4f} nats/token (the best val/loss possible)")
        else:
            shards = self.shards or text_shards(Path(hp["data_dir"]), self.tokenizer, hp["val_fraction"])
            streams = {"train": list(shards["train"]), "val": list(shards["val"]), "test": list(shards["val"])}
        self.splits = {split: PackedSequences(s, hp["context"]) for split, s in streams.items()}

    def train_dataloader(self) -> Any:
        hp = self.hparams
        return train_loader(self.splits["train"], hp["batch_size"], hp["seed"], hp["num_workers"], hp["pin_memory"])

    def val_dataloader(self) -> Any:
        return self._eval("val")

    def test_dataloader(self) -> Any:
        return self._eval("test")

    def _eval(self, split: str) -> Any:
        hp = self.hparams
        return eval_loader(self.splits[split], hp["batch_size"], hp["num_workers"], hp["pin_memory"])
