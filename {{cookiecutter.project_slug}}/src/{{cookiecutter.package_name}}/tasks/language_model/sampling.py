"""Text from a trained checkpoint or Hugging Face GPT-2 weights: generate.py's model loading and sampling.

Sampling keeps each block's keys and values (`LayerCache`), so each new token costs one position's work, not the
whole sequence's. The samples are drawn together, as one batch, from one seeded generator: the same seed gives the
same text, and --top-k 1 always takes the likeliest token (greedy decoding).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch
from lightning_gpu_engine import ConfigError, check_checkpoint

from .config import GenerateOptions
from .gpt import GPT, LayerCache, load_hf_gpt2
from .inputs import checkpoint_file, hf_config
from .module import TOKENIZER
from .tokenizer import Tokenizer, load_tokenizer

DEFAULT_NEW_TOKENS = 100
SHAPE = ("vocab_size", "layers", "heads", "width", "positions")  # the hparams that rebuild the network


def load_checkpoint(path: str) -> tuple[GPT, Tokenizer]:
    file = checkpoint_file(path)
    checkpoint = check_checkpoint(file, option="checkpoint", training=False)
    hparams = checkpoint.get("hyper_parameters") or {}
    if not all(key in hparams for key in SHAPE) or TOKENIZER not in checkpoint:
        raise ConfigError("checkpoint", f"{path} is not a language model's checkpoint (another task's?); give one")
    net = GPT(*(int(hparams[key]) for key in SHAPE))
    weights = {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    try:
        net.load_state_dict(weights)
    except RuntimeError as err:
        raise ConfigError("checkpoint", f"{path}: its weights do not fit its own hparams ({err})") from None
    return net, Tokenizer(checkpoint[TOKENIZER])


def load_pretrained(folder: str, tokenizer: str | None) -> tuple[GPT, Tokenizer]:
    shape = hf_config(Path(folder))
    own = Path(folder, "tokenizer.json")
    if tokenizer is None and not own.is_file():
        raise ConfigError("tokenizer", f"{folder} has no tokenizer.json: give --tokenizer FILE")
    net = GPT(shape["vocab_size"], shape["n_layer"], shape["n_head"], shape["n_embd"], shape["n_positions"])
    load_hf_gpt2(net, Path(folder))
    return net, load_tokenizer("tokenizer", tokenizer or str(own))


def prompt_tokens(opts: GenerateOptions, net: GPT, tokenizer: Tokenizer) -> list[int]:
    ids = tokenizer.encode(opts.prompt)
    if not ids:
        raise ConfigError("prompt", "encodes to no tokens; give some text")
    if max(ids) >= net.vocab_size:
        raise ConfigError(
            "prompt",
            f"holds token {max(ids)}, outside the model's vocabulary of {net.vocab_size}: the tokenizer is not the "
            "one the weights were trained with",
        )
    if len(ids) >= net.context:
        raise ConfigError("prompt", f"is {len(ids)} tokens, the model's context is {net.context}; shorten it")
    return ids


def fit_new_tokens(opts: GenerateOptions, net: GPT, prompt: list[int]) -> GenerateOptions:
    """--max-new-tokens as given, when the context holds it; unset, 100, or what the context leaves, said in a note."""
    room = net.context - len(prompt)
    if opts.max_new_tokens is None:  # a small model's context (the CPU quickstart's 64) is shorter than 100
        if room < DEFAULT_NEW_TOKENS:
            print(f"note: {room} new tokens, what the model's context of {net.context} leaves after the prompt")
        return replace(opts, max_new_tokens=min(DEFAULT_NEW_TOKENS, room))
    if opts.max_new_tokens > room:
        raise ConfigError(
            "max_new_tokens",
            f"{opts.max_new_tokens} after a {len(prompt)}-token prompt passes the model's context of {net.context}; "
            f"give at most {room}",
        )
    return opts


@torch.no_grad()
def sample(net: GPT, prompt: list[int], opts: GenerateOptions, eot: int, device: torch.device) -> list[list[int]]:
    """`opts.num_samples` continuations of `prompt`, each ending at end-of-text or after max_new_tokens (set: see
    `fit_new_tokens`)."""
    assert opts.max_new_tokens is not None
    net.eval()
    generator = torch.Generator(device).manual_seed(opts.seed)
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    half = opts.precision == "bf16" or (opts.precision == "auto" and cuda_bf16)
    autocast = torch.autocast(device.type, torch.bfloat16) if half else nullcontext()
    caches = [LayerCache() for _ in net.h]
    tokens = torch.tensor([prompt] * opts.num_samples, device=device)
    out: list[list[int]] = [[] for _ in range(opts.num_samples)]
    done = torch.zeros(opts.num_samples, dtype=torch.bool, device=device)
    position = 0
    with autocast:
        for _ in range(opts.max_new_tokens):
            logits = net(tokens, caches, start=position)[:, -1, : net.vocab_size].float()  # never a padded id
            position += tokens.size(1)
            if opts.top_k is not None and opts.top_k < logits.size(-1):
                kth = torch.topk(logits, opts.top_k).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            if opts.top_k == 1:  # greedy: the likeliest token, whatever the temperature
                tokens = logits.argmax(dim=-1, keepdim=True)
            else:
                tokens = torch.multinomial(torch.softmax(logits / opts.temperature, dim=-1), 1, generator=generator)
            for i, token in enumerate(tokens[:, 0].tolist()):
                if not done[i]:
                    out[i].append(token)
            done |= tokens[:, 0] == eot
            if bool(done.all()):
                break
    return out
