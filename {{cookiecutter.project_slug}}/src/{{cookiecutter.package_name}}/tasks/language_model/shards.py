"""Token shards in llm.c's `.bin` layout, and the text folders they are made from.

A shard is a header of 256 int32 (magic 20240520, version, token count, zeros), then the tokens: uint16 (version 1,
GPT-2's vocabulary fits) or uint32 (version 7, llm.c's Llama 3 files). llm.c and modded-nanogpt read and write it, so
shards go both ways; nanoGPT's headerless uint16 `train.bin`/`val.bin` are read too.

A text folder's `.txt` files (one document each) and `.jsonl` files (one document per line, its "text" field) are
tokenized once into DATA_DIR/.tokens/<tokenizer>/, written atomically, and the manifest, written last, says which files
and tokenizer made them: the shards are reused while both are unchanged and rebuilt when either changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ...engine import ConfigError, partial_path, publish
from .tokenizer import Tokenizer

MAGIC, HEADER = 20240520, 256
VERSIONS = {1: np.uint16, 7: np.uint32}
SHARD_TOKENS = 100_000_000  # llm.c's shard size: 200 MB of uint16
TEXT_SUFFIXES = (".txt", ".jsonl")
CHUNK = 1024  # documents per encode_batch call: the tokenizers library encodes a batch on all cores


def write_shard(path: Path, tokens: np.ndarray) -> None:
    """Written under a temporary name and renamed, so a killed run never leaves a truncated shard."""
    dtype = np.uint16 if tokens.size == 0 or int(tokens.max()) < 1 << 16 else np.uint32
    header = np.zeros(HEADER, dtype=np.int32)
    header[:3] = MAGIC, 1 if dtype == np.uint16 else 7, tokens.size
    partial = partial_path(path, str(os.getpid()))  # the ranks of a node may all be writing it
    with open(partial, "wb") as file:
        file.write(header.tobytes())
        file.write(tokens.astype(dtype, copy=False).tobytes())
        file.flush()
        os.fsync(file.fileno())
    publish(partial, path)


def read_shard(path: Path) -> np.ndarray:
    """The tokens of an llm.c shard (or a headerless nanoGPT uint16 file), memory-mapped: nothing is read yet."""
    try:
        size = path.stat().st_size
        header = np.fromfile(path, dtype=np.int32, count=HEADER) if size >= HEADER * 4 else np.zeros(0, np.int32)
    except OSError as err:
        raise ConfigError("data_dir", f"cannot read {path}: {err.strerror or err}") from None
    if len(header) == HEADER and header[0] == MAGIC:
        dtype = VERSIONS.get(int(header[1]))
        count = int(header[2])
        if dtype is None or HEADER * 4 + count * np.dtype(dtype).itemsize != size:
            raise ConfigError(
                "data_dir", f"{path} has llm.c's header but version {header[1]} or a length that does not match it"
            )
        return np.memmap(path, dtype=dtype, mode="r", offset=HEADER * 4, shape=(count,))
    if size % 2 or size == 0:
        raise ConfigError("data_dir", f"{path} is neither an llm.c shard nor nanoGPT's uint16 tokens ({size} bytes)")
    return np.memmap(path, dtype=np.uint16, mode="r")


def token_shards(data_dir: Path, vocab_size: int) -> dict[str, list[Path]]:
    """--data tokens: the folder's *train*.bin and *val*.bin files, checked against the tokenizer's vocabulary."""
    found = {split: sorted(data_dir.glob(f"*{split}*.bin")) for split in ("train", "val")}
    for split, paths in found.items():
        if not paths:
            raise ConfigError("data_dir", f"{data_dir} has no *{split}*.bin token shards (llm.c or nanoGPT format)")
        for path in paths:
            tokens = read_shard(path)
            if tokens.size and int(tokens.max()) >= vocab_size:
                raise ConfigError(
                    "tokenizer",
                    f"{path} holds token {int(tokens.max())}, past this tokenizer's {vocab_size}: give the tokenizer "
                    "the shards were made with",
                )
    return found


def text_files(data_dir: Path) -> list[Path]:
    if not data_dir.is_dir():
        raise ConfigError("data_dir", f"{data_dir} is not a folder; give the folder holding your .txt/.jsonl files")
    files = sorted(p for p in data_dir.rglob("*") if p.suffix in TEXT_SUFFIXES and ".tokens" not in p.parts)
    if not files:
        raise ConfigError("data_dir", f"{data_dir} holds no .txt or .jsonl files")
    return files


def documents(path: Path) -> Iterator[str]:
    """A .txt file is one document; each line of a .jsonl file is one, its "text" field."""
    try:
        if path.suffix == ".txt":
            yield path.read_text(encoding="utf-8")
            return
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)["text"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise ConfigError("data_dir", f'{path}:{number}: not a JSON object with a "text" field') from None
                if not isinstance(text, str):
                    raise ConfigError("data_dir", f'{path}:{number}: "text" is not a string')
                yield text
    except UnicodeDecodeError as err:
        raise ConfigError("data_dir", f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from None


def has_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def text_shards(data_dir: Path, tokenizer: Tokenizer, val_fraction: float) -> dict[str, list[Path]]:
    """--data text: the folder's shards, made now unless the manifest says they were made from these very files."""
    files = text_files(data_dir)
    made_from = {
        "files": [[str(p.relative_to(data_dir)), p.stat().st_size, p.stat().st_mtime_ns] for p in files],
        "tokenizer": tokenizer.digest,
        "val_fraction": val_fraction,
    }
    folder = data_dir / ".tokens" / tokenizer.digest
    manifest = folder / "manifest.json"
    try:
        saved = json.loads(manifest.read_text())
        if saved["made_from"] == made_from:
            damaged = [n for n, size in saved["bytes"].items() if not has_size(folder / n, size)]
            if not damaged:
                return {split: [folder / n for n in names] for split, names in saved["shards"].items()}
            print(f"note: {folder / damaged[0]} is not the size it was written at (cut or replaced): tokenizing again")
    except (OSError, ValueError, KeyError):
        pass  # none yet, or from an older run that was killed: made again
    pieces = []
    for path in files:
        batch: list[str] = []
        for doc in (*documents(path), None):
            if doc is not None:
                batch.append(doc)
            if batch and (doc is None or len(batch) == CHUNK):
                for ids in tokenizer.encode_batch(batch):
                    pieces.append(np.array([*ids, tokenizer.eot], dtype=np.uint32))
                batch = []
    tokens = np.concatenate(pieces)
    cut = int(len(tokens) * (1 - val_fraction))
    if cut < 2 or len(tokens) - cut < 2:
        raise ConfigError("data_dir", f"{data_dir} holds {len(tokens)} tokens: too few to split for validation")
    folder.mkdir(parents=True, exist_ok=True)
    shards: dict[str, list[str]] = {}
    for split, part in (("train", tokens[:cut]), ("val", tokens[cut:])):
        shards[split] = []
        for index, start in enumerate(range(0, len(part), SHARD_TOKENS)):
            name = f"{split}_{index:06d}.bin"
            write_shard(folder / name, part[start : start + SHARD_TOKENS])
            shards[split].append(name)
    partial = partial_path(manifest, str(os.getpid()))
    sizes = {n: (folder / n).stat().st_size for names in shards.values() for n in names}
    partial.write_text(json.dumps({"made_from": made_from, "shards": shards, "bytes": sizes}, indent=1))
    publish(partial, manifest)  # last: it vouches for the shards
    print(f"tokenized {len(files)} files into {len(tokens)} tokens: {folder}", flush=True)
    return {split: [folder / n for n in names] for split, names in shards.items()}
