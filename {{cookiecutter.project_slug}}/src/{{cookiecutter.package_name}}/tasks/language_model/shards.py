"""Token shards in llm.c's `.bin` layouts, and the text folders they are made from.

llm.c's `dev/data/data_common.py` writes a header of 256 int32 (magic, version, token count, zeros), then the tokens:
magic 20240520 with version 1 and uint16 tokens (GPT-2's vocabulary fits), or magic 20240801 with version 7 and uint32
tokens (Llama 3's 128,256). Both are read and written byte for byte as llm.c does, so shards go both ways with llm.c
and modded-nanogpt. nanoGPT's headerless uint16 files are read under the names nanoGPT gives them, train.bin and
val.bin; any other file without a known header is refused rather than guessed at.

A text folder's `.txt` files (one document each) and `.jsonl` files (one document per line, its "text" field) are
tokenized once into DATA_DIR/.tokens/<tokenizer>/, written atomically, and the manifest, written last, says which files
and tokenizer made them: the shards are reused while both are unchanged and rebuilt when either changes. Validation
takes whole documents, chosen by a hash of their text, so it samples every source of the folder alike.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from lightning_gpu_engine import ConfigError, partial_path, publish

from .tokenizer import Tokenizer

HEADER = 256  # int32: 1,024 bytes
GPT2, LLAMA3 = 20240520, 20240801
FORMATS: dict[int, tuple[int, np.dtype[Any], str]] = {  # magic: its version, token type, and the model it was for
    GPT2: (1, np.dtype("<u2"), "GPT-2"),
    LLAMA3: (7, np.dtype("<u4"), "Llama 3"),
}
KNOWN = "llm.c's magic 20240520 (uint16 tokens) or 20240801 (uint32), or nanoGPT's headerless train.bin and val.bin"
NANOGPT_NAMES = ("train.bin", "val.bin")
SHARD_TOKENS = 100_000_000  # llm.c's shard size: 200 MB of uint16
TEXT_SUFFIXES = (".txt", ".jsonl")
CHUNK = 1024  # documents per encode_batch call: the tokenizers library encodes a batch on all cores
LAYOUT = 2  # in the manifest: caches written before the Llama 3 magic was used for uint32 are made again


def write_shard(path: Path, tokens: np.ndarray) -> None:
    """Written under a temporary name and renamed, so a killed run never leaves a truncated shard."""
    magic = GPT2 if tokens.size == 0 or int(tokens.max()) < 1 << 16 else LLAMA3
    version, dtype, _ = FORMATS[magic]
    header = np.zeros(HEADER, dtype="<i4")
    header[:3] = magic, version, tokens.size
    partial = partial_path(path, str(os.getpid()))  # the ranks of a node may all be writing it
    with open(partial, "wb") as file:
        file.write(header.tobytes())
        file.write(tokens.astype(dtype, copy=False).tobytes())
        file.flush()
        os.fsync(file.fileno())
    publish(partial, path)


def read_shard(path: Path) -> np.ndarray:
    """The tokens of an llm.c shard (or of nanoGPT's train.bin/val.bin), memory-mapped: nothing is read yet."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as file:
            head = file.read(HEADER * 4)
    except OSError as err:
        raise ConfigError("data_dir", f"cannot read {path}: {err.strerror or err}") from None
    magic = int(np.frombuffer(head[:4], "<i4")[0]) if len(head) >= 4 else None
    if magic in FORMATS:
        version, dtype, name = FORMATS[magic]
        if len(head) < HEADER * 4:
            damaged = f"cut at {size} bytes, inside llm.c's {HEADER * 4}-byte header"
        else:
            header = np.frombuffer(head, "<i4")
            count, expected = int(header[2]), HEADER * 4 + int(header[2]) * dtype.itemsize
            if header[1] != version:
                damaged = f"llm.c's {name} magic {magic} goes with version {version}, its header says {header[1]}"
            elif count < 0 or size != expected:
                damaged = f"its header says {count} tokens ({expected} bytes), the file has {size} bytes"
            else:
                return np.memmap(path, dtype=dtype, mode="r", offset=HEADER * 4, shape=(count,))
        raise ConfigError("data_dir", f"{path} is damaged: {damaged}; make it again or copy it whole")
    if path.name not in NANOGPT_NAMES:
        raise ConfigError("data_dir", f"{path} has no known header (magic {magic}); token shards are {KNOWN}")
    if size % 2 or size == 0:
        raise ConfigError("data_dir", f"{path}: nanoGPT's {path.name} holds uint16 tokens, not {size} bytes")
    return np.memmap(path, dtype="<u2", mode="r")


def shard_paths(data_dir: Path) -> dict[str, list[Path]]:
    """--data tokens: the folder's *train*.bin and *val*.bin files, each with a whole header (no token read yet)."""
    found = {split: sorted(data_dir.glob(f"*{split}*.bin")) for split in ("train", "val")}
    for split, paths in found.items():
        if not paths:
            raise ConfigError("data_dir", f"{data_dir} has no *{split}*.bin token shards ({KNOWN})")
        for path in paths:
            read_shard(path)
    return found


def token_shards(data_dir: Path, vocab_size: int) -> dict[str, list[Path]]:
    """--data tokens: the folder's shards, their tokens checked against the tokenizer's vocabulary."""
    found = shard_paths(data_dir)
    for paths in found.values():
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


def digest(path: Path) -> str:
    """BLAKE2b of the file: a shard zeroed or overwritten at the same size has another (about 1 GB/s on one core)."""
    found = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            found.update(chunk)
    return found.hexdigest()


def is_whole(path: Path, size: int, checksum: str) -> bool:
    try:
        return path.stat().st_size == size and digest(path) == checksum
    except OSError:
        return False


def text_shards(data_dir: Path, tokenizer: Tokenizer, val_fraction: float) -> dict[str, list[Path]]:
    """--data text: the folder's shards, made now unless the manifest says they were made from these very files."""
    files = text_files(data_dir)
    made_from = {
        "files": [[str(p.relative_to(data_dir)), p.stat().st_size, p.stat().st_mtime_ns] for p in files],
        "tokenizer": tokenizer.digest,
        "val_fraction": val_fraction,
        "layout": LAYOUT,
    }
    folder = data_dir / ".tokens" / tokenizer.digest
    manifest = folder / "manifest.json"
    try:
        saved = json.loads(manifest.read_text())
        if saved["made_from"] == made_from:
            damaged = [n for n, size in saved["bytes"].items() if not is_whole(folder / n, size, saved["blake2b"][n])]
            if not damaged:
                return {split: [folder / n for n in names] for split, names in saved["shards"].items()}
            print(
                f"note: {folder / damaged[0]} is not the file it was written as (cut, replaced or damaged): "
                "tokenizing again"
            )
    except (OSError, ValueError, KeyError):
        pass  # none yet, or from an older run that was killed, or a manifest without checksums: made again
    splits = split_documents(data_dir, files, tokenizer, val_fraction)
    folder.mkdir(parents=True, exist_ok=True)
    shards: dict[str, list[str]] = {}
    for split, part in splits.items():
        shards[split] = []
        for index, start in enumerate(range(0, len(part), SHARD_TOKENS)):
            name = f"{split}_{index:06d}.bin"
            write_shard(folder / name, part[start : start + SHARD_TOKENS])
            shards[split].append(name)
    partial = partial_path(manifest, str(os.getpid()))
    names = [n for names in shards.values() for n in names]
    sizes, checksums = {n: (folder / n).stat().st_size for n in names}, {n: digest(folder / n) for n in names}
    partial.write_text(
        json.dumps({"made_from": made_from, "shards": shards, "bytes": sizes, "blake2b": checksums}, indent=1)
    )
    publish(partial, manifest)  # last: it vouches for the shards
    total = sum(len(part) for part in splits.values())
    print(f"tokenized {len(files)} files into {total} tokens: {folder}", flush=True)
    return {split: [folder / n for n in names] for split, names in shards.items()}


def in_validation(text: str, val_fraction: float) -> bool:
    """A document's split, by a hash of its text: stable across runs, machines and file order, and a document
    repeated in the folder lands on one side only."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") < val_fraction * 2**64


def split_documents(
    data_dir: Path, files: list[Path], tokenizer: Tokenizer, val_fraction: float
) -> dict[str, np.ndarray]:
    """Each document's tokens and end-of-text token, in the split its hash chose. A folder of too few documents for
    that (one long .txt, as nanoGPT's Shakespeare) keeps the last `val_fraction` of its tokens instead, and says so."""
    pieces: list[np.ndarray] = []
    chosen: list[bool] = []
    for path in files:
        batch: list[str] = []
        for doc in (*documents(path), None):
            if doc is not None:
                batch.append(doc)
            if batch and (doc is None or len(batch) == CHUNK):
                for text, ids in zip(batch, tokenizer.encode_batch(batch), strict=True):
                    pieces.append(np.array([*ids, tokenizer.eot], dtype=np.uint32))
                    chosen.append(in_validation(text, val_fraction))
                batch = []
    splits = {
        name: np.concatenate([p for p, v in zip(pieces, chosen, strict=True) if v == val] or [np.zeros(0, np.uint32)])
        for name, val in (("train", False), ("val", True))
    }
    if min(len(tokens) for tokens in splits.values()) >= 2:
        return splits
    tokens = np.concatenate(pieces)
    cut = int(len(tokens) * (1 - val_fraction))
    if cut < 2 or len(tokens) - cut < 2:
        raise ConfigError("data_dir", f"{data_dir} holds {len(tokens)} tokens: too few to split for validation")
    few = f"note: {data_dir} holds too few documents ({len(pieces)}) to pick whole ones for validation"
    print(f"{few}: it takes the last {val_fraction:g} of the tokens", flush=True)
    return {"train": tokens[:cut], "val": tokens[cut:]}
