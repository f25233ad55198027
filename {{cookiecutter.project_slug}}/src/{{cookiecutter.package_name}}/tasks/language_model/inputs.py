"""The language model's files, checked before torch and Lightning load (`Task.check_inputs`): a typo in a path, an
empty text folder, a damaged shard header or an unreadable tokenizer answers in a fraction of a second, not after
seconds of imports. The DataModule and the model read the same files again and check what needs their contents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightning_gpu_engine import Config, ConfigError

from .tokenizer import Tokenizer, load_tokenizer


def run_tokenizer(opts: Any) -> Tokenizer:
    """--tokenizer, or with --pretrained and the default 'bytes', the tokenizer.json in the pretrained folder."""
    folder_tokenizer = Path(opts.pretrained or "", "tokenizer.json")
    if opts.pretrained and opts.tokenizer == "bytes" and folder_tokenizer.is_file():
        return load_tokenizer("pretrained", str(folder_tokenizer))
    return load_tokenizer("tokenizer", opts.tokenizer)


def hf_config(folder: Path) -> dict[str, int]:
    """The shape of a Hugging Face GPT-2 folder's model, from its config.json."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except OSError as err:
        raise ConfigError("pretrained", f"cannot read {folder / 'config.json'}: {err.strerror or err}") from None
    except ValueError:
        raise ConfigError("pretrained", f"{folder / 'config.json'} is not JSON") from None
    if config.get("model_type") != "gpt2":
        raise ConfigError("pretrained", f"{folder} holds a {config.get('model_type')!r} model; give a GPT-2 folder")
    if config.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ConfigError("pretrained", f"{folder}: activation {config['activation_function']} is not GPT-2's")
    return {k: int(config[k]) for k in ("vocab_size", "n_layer", "n_head", "n_embd", "n_positions")}


def pretrained_shape(folder: str, tokenizer: Tokenizer, context: int) -> dict[str, int]:
    """A GPT-2 folder's shape, refused unless it fits the tokenizer and the context."""
    shape = hf_config(Path(folder))
    if shape["vocab_size"] != tokenizer.vocab_size:
        raise ConfigError(
            "tokenizer",
            f"has {tokenizer.vocab_size} tokens, the weights in {folder} {shape['vocab_size']}: "
            "give the tokenizer.json they were trained with",
        )
    if context > shape["n_positions"]:
        raise ConfigError("context", f"{folder} takes at most {shape['n_positions']} tokens")
    return shape


def checkpoint_file(path: str) -> Path:
    """generate.py's and export.py's --checkpoint, there at all; what it holds is read once torch is loaded."""
    if not Path(path).exists():
        raise ConfigError("checkpoint", f"no file at {path}; give a .ckpt that train.py wrote")
    return Path(path)


def check_inputs(cfg: Config, opts: Any) -> None:
    """The tokenizer, the pretrained folder's shape, and the data folder as far as names and headers tell."""
    from .shards import shard_paths, text_files  # numpy: loaded only where a path is to be checked

    tokenizer = run_tokenizer(opts)
    if opts.pretrained:
        pretrained_shape(opts.pretrained, tokenizer, opts.context)
    if opts.data == "text":
        text_files(Path(opts.data_dir))
    elif opts.data == "tokens":
        shard_paths(Path(opts.data_dir))
