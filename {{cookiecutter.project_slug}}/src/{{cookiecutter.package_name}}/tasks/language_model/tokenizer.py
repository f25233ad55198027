"""Tokenizers that work offline: bytes (the default), or a Hugging Face `tokenizer.json` file (GPT-2's, or a BPE
trained here on your own text with `train_bpe`).

A tokenizer is saved into every checkpoint as its `spec` (a text: "bytes", or the whole tokenizer.json), so generation
and a resumed run decode and encode with the very tokenizer the weights were trained with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lightning_gpu_engine import ConfigError, write_text

END_OF_TEXT = "<|endoftext|>"  # GPT-2's separator between documents; the byte tokenizer's id 256


class Tokenizer:
    """`spec`: what rebuilds it (`from_spec`); `eot`: the end-of-text id; ids go from 0 to vocab_size - 1."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.hf: Any = None
        if spec == "bytes":
            self.vocab_size, self.eot = 257, 256
            return
        from tokenizers import Tokenizer as HFTokenizer

        self.hf = HFTokenizer.from_str(spec)
        eot = self.hf.token_to_id(END_OF_TEXT)
        if eot is None:
            raise ValueError(f"it has no {END_OF_TEXT} token to end documents with")
        self.vocab_size, self.eot = int(self.hf.get_vocab_size()), int(eot)

    @property
    def digest(self) -> str:
        """Names the tokenizer in the shard manifest: another tokenizer means other shards."""
        return hashlib.sha256(self.spec.encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        return "bytes" if self.hf is None else f"tokenizer.json ({self.vocab_size} tokens)"

    def encode(self, text: str) -> list[int]:
        if self.hf is None:
            return list(text.encode("utf-8"))
        return list(self.hf.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if self.hf is None:
            return [self.encode(t) for t in texts]
        return [list(e.ids) for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        ids = [i for i in ids if i != self.eot]
        if self.hf is None:
            return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
        return str(self.hf.decode(ids, skip_special_tokens=False))


def load_tokenizer(option: str, value: str) -> Tokenizer:
    """`--tokenizer bytes` or a tokenizer.json path; a bad one raises ConfigError naming `option`."""
    if value == "bytes":
        return Tokenizer("bytes")
    path = Path(value)
    try:
        text = path.read_text()
        json.loads(text)
        return Tokenizer(text)
    except OSError as err:
        raise ConfigError(
            option, f"cannot read {value}: {err.strerror or err}; give 'bytes' or a tokenizer.json"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(option, f"{value} is not JSON; give 'bytes' or a Hugging Face tokenizer.json") from None
    except Exception as err:  # the tokenizers library's own error for a JSON that is not a tokenizer
        raise ConfigError(option, f"{value} is not a usable tokenizer.json: {str(err).splitlines()[0]}") from None


def train_bpe(texts: Iterable[str], vocab_size: int, output: Path | None = None) -> Tokenizer:
    """A byte-level BPE (GPT-2's scheme) learnt from `texts`, with end-of-text; saved as the tokenizer.json `output`,
    if given."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodes, even ones the files lack
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer)
    if output is not None:
        write_text(output, hf.to_str())
    return Tokenizer(hf.to_str())
