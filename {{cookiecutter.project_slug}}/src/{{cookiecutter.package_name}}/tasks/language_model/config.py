"""The language model's options, each with its default and why: train.py's beside the engine's `Config`, and the whole
of generate.py's, export.py's and prepare_data.py's. Each of the latter checks the files it names in `check_inputs`
(parse_options calls it), as train.py's task does in inputs.py: before torch loads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from lightning_gpu_engine import ConfigError, check_choices, check_input, check_path, opt, parse_chunk_bytes

DATA_SOURCES = ("synthetic", "text", "tokens", "streaming")
# Named sizes: (layers, heads, width). GPT-2's four, and two that train in minutes on a CPU.
SIZES = {
    "tiny": (2, 2, 64),
    "nano": (4, 4, 128),
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
}
MAX_CONTEXT = 1 << 16
CHECKPOINT = "a .ckpt that train.py wrote, e.g. outputs/checkpoints/last.ckpt"


@dataclass
class LanguageOptions:
    # --- data ------------------------------------------------------------------------------
    data: str = opt(
        "synthetic",
        "synthetic: a seeded Markov language with a known entropy floor, no download; text: .txt/.jsonl files in "
        "--data-dir; tokens: llm.c or nanoGPT .bin shards in --data-dir; streaming: prepare_data.py's chunks in "
        "--data-dir (a folder or s3://bucket/prefix)",
        DATA_SOURCES,
    )
    data_dir: str | None = opt(
        None, "text or tokens: the folder (text's token shards are cached in DATA_DIR/.tokens); streaming: or s3://"
    )
    cache_dir: str | None = opt(
        None, "streaming from s3://: where LitData keeps each split's index (KBs); unset = $TMPDIR/litdata (node-local)"
    )
    tokenizer: str = opt("bytes", "bytes: 256 byte values + end-of-text; or a Hugging Face tokenizer.json file")
    train_tokens: int = opt(2_000_000, "synthetic: tokens generated for training (validation and test: 1/20 each)")
    val_fraction: float = opt(0.05, "text: the share of documents kept for validation, chosen by a hash of their text")
    # --- network -----------------------------------------------------------------------------
    model: str = opt("nano", "a named size: tiny and nano for CPUs, or GPT-2's (gpt2 = 124M)", tuple(SIZES))
    n_layer: int | None = opt(None, "transformer blocks; unset = the --model size's")
    n_head: int | None = opt(None, "attention heads; unset = the --model size's")
    n_embd: int | None = opt(None, "width; must divide by --n-head; unset = the --model size's")
    context: int = opt(256, "tokens per training sequence (GPT-2: 1024); documents are packed across sequences")
    dropout: float = opt(0.0, "on attention and residuals; 0 for pre-training on plenty of data")
    pretrained: str | None = opt(None, "a Hugging Face GPT-2 folder (config.json + model.safetensors) to start from")

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("data_dir", "tokenizer", "pretrained", "cache_dir"):
            check_path(name, getattr(self, name))
        if self.data != "synthetic" and not self.data_dir:
            raise ConfigError("data_dir", f"--data {self.data} reads a folder: give --data-dir DIR")
        if self.train_tokens < 1000:
            raise ConfigError("train_tokens", f"must be at least 1000, got {self.train_tokens}")
        if not 0 < self.val_fraction < 1:
            raise ConfigError("val_fraction", f"must be between 0 and 1 (0.05 is usual), got {self.val_fraction}")
        if not 2 <= self.context <= MAX_CONTEXT:
            raise ConfigError("context", f"must be from 2 to {MAX_CONTEXT} tokens, got {self.context}")
        if not 0 <= self.dropout < 1 or not math.isfinite(self.dropout):
            raise ConfigError("dropout", f"must be in [0, 1), got {self.dropout}")
        for name in ("n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(name, f"must be a positive integer, got {value}")
        _, heads, width = self.shape
        if width % heads:
            raise ConfigError("n_embd", f"{width} does not divide into {heads} heads; give a multiple of {heads}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(layers, heads, width): the named size's, with any field given overriding it."""
        layers, heads, width = SIZES[self.model]
        return self.n_layer or layers, self.n_head or heads, self.n_embd or width


@dataclass
class GenerateOptions:
    prompt: str = opt("", "the text to continue")
    checkpoint: str | None = opt(None, "a train.py checkpoint (.ckpt); its tokenizer comes with it")
    pretrained: str | None = opt(None, "or a Hugging Face GPT-2 folder, used without training")
    tokenizer: str | None = opt(None, "with --pretrained: a tokenizer.json when the folder has none")
    max_new_tokens: int | None = opt(
        None, "tokens to generate per sample, fewer if end-of-text comes first; unset = 100, or what the context leaves"
    )
    temperature: float = opt(1.0, "divides the logits: below 1 sharper, above 1 more varied")
    top_k: int | None = opt(None, "sample among the k likeliest tokens only; 1 = greedy decoding")
    seed: int = opt(0, "the same seed gives the same samples")
    num_samples: int = opt(1, "independent continuations of the prompt")
    output: str | None = opt(None, "also write one JSON object per sample (prompt, text, tokens) to FILE.jsonl")
    accelerator: str = opt("auto", "auto: CUDA when a GPU is visible, else CPU", ("auto", "cpu", "cuda"))
    precision: str = opt("auto", "auto: bf16 on a CUDA GPU that has it, else fp32", ("auto", "bf16", "32"))

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("checkpoint", "pretrained", "tokenizer", "output"):
            check_path(name, getattr(self, name))
        if (self.checkpoint is None) == (self.pretrained is None):
            raise ConfigError("checkpoint", "give a checkpoint to generate from, or --pretrained DIR (one of them)")
        if not self.prompt:
            raise ConfigError("prompt", "is empty; give the text to continue, e.g. --prompt 'Once upon a time'")
        try:  # a terminal in another encoding (Latin-1) sends bytes that Python keeps as lone surrogates
            self.prompt.encode("utf-8")
        except UnicodeEncodeError as err:
            byte = self.prompt[err.start].encode("utf-8", "surrogateescape").hex()
            raise ConfigError(
                "prompt",
                f"is not UTF-8 text (byte 0x{byte} at character {err.start + 1}); set the terminal to UTF-8, or "
                "pass the text in UTF-8",
            ) from None
        if (self.max_new_tokens is not None and self.max_new_tokens < 1) or self.num_samples < 1:
            bad = "num_samples" if self.num_samples < 1 else "max_new_tokens"
            raise ConfigError(bad, f"must be a positive integer, got {getattr(self, bad)}")
        if not self.temperature > 0 or not math.isfinite(self.temperature):
            raise ConfigError("temperature", f"must be a positive number, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError("top_k", f"must be a positive integer, got {self.top_k}")
        if not 0 <= self.seed < 2**63:
            raise ConfigError("seed", f"must be 0 or more, got {self.seed}")
        if self.output is not None and not self.output.endswith(".jsonl"):
            raise ConfigError("output", f"must end in .jsonl (one JSON object per sample), got {self.output!r}")

    def check_inputs(self) -> None:
        from .inputs import hf_config
        from .tokenizer import load_tokenizer

        if self.checkpoint is not None:
            check_input("checkpoint", self.checkpoint, CHECKPOINT)
        if self.pretrained is not None:
            hf_config(Path(self.pretrained))
        if self.tokenizer is not None:
            load_tokenizer("tokenizer", self.tokenizer)


@dataclass
class ExportOptions:
    checkpoint: str = opt("", "a .ckpt of a language model from train.py: its tokenizer comes with it")
    format: str = opt("hf", "hf: a folder for transformers, vLLM and the Hub (safetensors, config, tokenizer)", ("hf",))
    output: str | None = opt(None, "the folder to write, not there yet; unset = beside the checkpoint, as NAME-hf")

    def __post_init__(self) -> None:
        check_choices(self)
        if not self.checkpoint:
            raise ConfigError("checkpoint", "give a .ckpt from train.py, e.g. outputs/checkpoints/last.ckpt")
        for name in ("checkpoint", "output"):
            check_path(name, getattr(self, name))

    def check_inputs(self) -> None:
        check_input("checkpoint", self.checkpoint, CHECKPOINT)


@dataclass
class PrepareOptions:
    data_dir: str = opt("data", "the folder of .txt/.jsonl files (as train.py --data text reads them)")
    output: str = opt("chunks", "a local folder or s3://bucket/prefix (AWS_ENDPOINT_URL for other S3 servers)")
    tokenizer: str = opt("bytes", "bytes, or a Hugging Face tokenizer.json: train.py must be given the same")
    context: int = opt(256, "tokens per training sequence, as train.py's --context (which must be the same)")
    val_fraction: float = opt(0.05, "the share of documents kept for validation, chosen by a hash of their text")
    chunk_bytes: str = opt("64MB", "target chunk size, with its unit (KB, MB, GB): LitData's advice; read by ranges")
    num_workers: int = opt(0, "writer processes; 0 = in this process (tokenizing is done before, on all cores)")

    def __post_init__(self) -> None:
        for name in ("data_dir", "output", "tokenizer"):
            check_path(name, getattr(self, name))
        if not 2 <= self.context <= MAX_CONTEXT:
            raise ConfigError("context", f"must be from 2 to {MAX_CONTEXT} tokens, got {self.context}")
        if not 0 < self.val_fraction < 1:
            raise ConfigError("val_fraction", f"must be between 0 and 1 (0.05 is usual), got {self.val_fraction}")
        if self.num_workers < 0:
            raise ConfigError("num_workers", f"must be 0 or more, got {self.num_workers}")
        parse_chunk_bytes(self.chunk_bytes)

    def check_inputs(self) -> None:
        from .shards import text_files  # numpy: loaded only where a path is to be checked
        from .tokenizer import load_tokenizer

        load_tokenizer("tokenizer", self.tokenizer)
        text_files(Path(self.data_dir))
