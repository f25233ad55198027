"""The network: GPT-2's architecture exactly (pre-norm blocks, causal attention, tanh GELU, tied input and output
embeddings), with parameter names as Hugging Face's, so GPT-2 weights load by name (`load_hf_gpt2`).

Attention is `scaled_dot_product_attention(is_causal=True)`, which picks a flash or cuDNN kernel on the GPU. The
vocabulary is padded to a multiple of 64 (GPT-2's 50257 -> 50304): the output layer's matrix multiply then runs on
tensor-core tiles; the padded ids are never targets, and generation never samples them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from lightning_gpu_engine import ConfigError
from torch import Tensor, nn


def padded(vocab_size: int) -> int:
    return math.ceil(vocab_size / 64) * 64


@dataclass
class LayerCache:
    """One block's keys and values so far, for generation: each new token attends to them without recomputing."""

    k: Tensor | None = None
    v: Tensor | None = None


class Attention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x: Tensor, cache: LayerCache | None = None) -> Tensor:
        batch, length, width = x.shape
        q, k, v = (
            t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
            for t in self.c_attn(x).split(width, dim=2)
        )
        if cache is not None:
            if cache.k is not None and cache.v is not None:
                k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
            cache.k, cache.v = k, v
        # A prompt (no past keys) is causal within itself; one new token attends to everything before it.
        causal = k.size(2) == length
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=causal and length > 1, dropout_p=self.dropout if self.training else 0.0
        )
        return self.c_proj(y.transpose(1, 2).reshape(batch, length, width))


class MLP(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # GPT-2's "gelu_new"


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width, eps=1e-5), nn.LayerNorm(width, eps=1e-5)
        self.attn, self.mlp = Attention(width, heads, dropout), MLP(width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, cache: LayerCache | None = None) -> Tensor:
        x = x + self.drop(self.attn(self.ln_1(x), cache))
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, layers: int, heads: int, width: int, context: int, dropout: float = 0.0):
        super().__init__()
        self.vocab_size, self.layers, self.heads, self.width, self.context = vocab_size, layers, heads, width, context
        self.wte = nn.Embedding(padded(vocab_size), width)
        self.wpe = nn.Embedding(context, width)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=1e-5)
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2: residual projections scaled down by depth
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def no_weight_decay(self) -> set[str]:
        return {"wte.weight", "wpe.weight"}  # the engine already spares norms and biases

    def forward(self, idx: Tensor, caches: list[LayerCache] | None = None, start: int = 0) -> Tensor:
        """Logits over the padded vocabulary for tokens `idx` (batch, length) at positions start, start + 1, ..."""
        positions = torch.arange(start, start + idx.size(1), device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(positions))
        for i, block in enumerate(self.h):
            x = block(x, caches[i] if caches is not None else None)
        return F.linear(self.ln_f(x), self.wte.weight)  # the output layer is the input embedding, transposed

    def flops_per_token(self, context: int) -> int:
        """PaLM's formula (Chowdhery et al. 2022, appendix B): 6N for the weights' matmuls forward and backward, plus
        12·L·H·Q·T for attention over `context` tokens. N leaves out the position embeddings: looked up, not
        multiplied."""
        n = sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()
        return 6 * n + 12 * self.layers * self.heads * (self.width // self.heads) * context


def load_hf_gpt2(net: GPT, folder: Path) -> None:
    """Copies a Hugging Face GPT-2's weights into `net` (same shape): its Conv1D weights are Linear's transposed."""
    from safetensors.torch import load_file

    path = folder / "model.safetensors"
    if not path.is_file():
        raise ConfigError("pretrained", f"{folder} has no model.safetensors")
    saved = {k.removeprefix("transformer."): v for k, v in load_file(str(path)).items()}
    own = net.state_dict()
    missing = sorted(k for k in own if k not in saved)
    if missing:
        raise ConfigError("pretrained", f"{path} lacks {', '.join(missing[:3])}: not a GPT-2 checkpoint")
    with torch.no_grad():
        for key, tensor in own.items():
            value = saved[key]
            if key.endswith(("c_attn.weight", "c_fc.weight", "c_proj.weight")):
                value = value.t()
            if key == "wte.weight":  # the padded rows stay as initialised: never a target, never sampled
                tensor[: value.size(0)].copy_(value)
            else:
                tensor.copy_(value)
