"""A checkpoint as a Hugging Face GPT-2 folder: `model.safetensors`, `config.json` and `tokenizer.json`, which
`transformers.GPT2LMHeadModel.from_pretrained`, vLLM and the Hub read, and `generate.py --pretrained` too.

The inverse of `gpt.load_hf_gpt2`: Hugging Face keeps GPT-2's Conv1D layout (Linear's weights transposed), the
vocabulary unpadded, and the output layer tied to the input embedding (so not stored). The byte tokenizer becomes a
byte-level BPE with no merges whose ids are the byte values, so encoding agrees id for id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from lightning_gpu_engine import ConfigError, PartialFolder
from torch import Tensor

from .gpt import GPT
from .sampling import load_pretrained
from .tokenizer import END_OF_TEXT, Tokenizer

CONV1D = ("c_attn.weight", "c_fc.weight", "c_proj.weight")
TOLERANCE = 1e-4  # fp32 logits of the same weights; any real difference (a transposed matrix) is order 1


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves, the rest for 256 + n."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in mapping]
    return mapping | {b: chr(256 + n) for n, b in enumerate(others)}


def bytes_tokenizer_json() -> str:
    vocab = {char: byte for byte, char in byte_to_unicode().items()} | {END_OF_TEXT: 256}
    spec: dict[str, Any] = {
        "version": "1.0",
        "added_tokens": [
            {
                "id": 256,
                "content": END_OF_TEXT,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {
            "type": "BPE",
            "vocab": vocab,
            "merges": [],
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
        },
    }
    return json.dumps(spec, ensure_ascii=False)


def hf_weights(net: GPT) -> dict[str, Tensor]:
    weights = {}
    for key, tensor in net.state_dict().items():
        value = tensor.t() if key.endswith(CONV1D) else tensor[: net.vocab_size] if key == "wte.weight" else tensor
        weights[f"transformer.{key}"] = value.detach().float().contiguous().clone()
    return weights


def gpt2_config(net: GPT, eot: int) -> dict[str, object]:
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": net.vocab_size,
        "n_positions": net.context,
        "n_ctx": net.context,
        "n_embd": net.width,
        "n_layer": net.layers,
        "n_head": net.heads,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "torch_dtype": "float32",
    }


def export_hf(net: GPT, tokenizer: Tokenizer, out: PartialFolder) -> float:
    """Writes the folder `out` stands for, whole or not at all, after reading it back: the largest logit difference
    from `net`."""
    from safetensors.torch import save_file

    save_file(hf_weights(net), str(out.path / "model.safetensors"), metadata={"format": "pt"})
    (out.path / "config.json").write_text(json.dumps(gpt2_config(net, tokenizer.eot), indent=2) + "\n")
    (out.path / "tokenizer.json").write_text(tokenizer.spec if tokenizer.hf is not None else bytes_tokenizer_json())
    diff = read_back_difference(net, out.path)
    if not diff <= TOLERANCE:
        raise ConfigError("checkpoint", f"the exported weights give logits {diff:.2e} away from its own; not written")
    out.publish()
    return diff


def read_back_difference(net: GPT, folder: Path) -> float:
    """The folder loaded by `generate.py --pretrained`'s own loader (config, tokenizer and weights), on a probe batch
    of every position."""
    again, _ = load_pretrained(str(folder), None)
    probe = torch.randint(0, net.vocab_size, (2, net.context), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = net.eval()(probe)[..., : net.vocab_size], again.eval()(probe)[..., : net.vocab_size]
    return float((ours - theirs).abs().max())
