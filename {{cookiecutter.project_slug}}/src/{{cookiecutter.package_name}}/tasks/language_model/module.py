"""The LightningModule: a GPT trained to predict the next token, one shared step for train, val and test; compile,
AdamW without decay on norms, biases and embeddings, and warm-up + cosine come from EngineModule."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning_gpu_engine import Config, EngineModule, Hardware, note, run_hparams
from torch import Tensor
from torchmetrics import MeanMetric

from .config import LanguageOptions
from .gpt import GPT, load_hf_gpt2
from .inputs import pretrained_shape
from .tokenizer import Tokenizer

Batch = tuple[Tensor, Tensor]
TOKENIZER = "tokenizer"  # the checkpoint key of the tokenizer's spec: generation and resume use that very one


class LanguageModel(EngineModule):
    net: GPT

    def __init__(
        self,
        vocab_size: int = 257,
        layers: int = 4,
        heads: int = 4,
        width: int = 128,
        positions: int = 256,
        context: int = 256,
        dropout: float = 0.0,
        tokenizer: str = "bytes",
        lr: float = 6e-4,
        weight_decay: float = 0.1,
        betas: Sequence[float] = (0.9, 0.95),
        warmup_fraction: float = 0.05,
        compile: bool = False,
        compile_mode: str = "default",
    ) -> None:
        """`positions`: the longest input the network takes (its position embeddings); `context`: the training
        sequence length, at most that. `tokenizer`: its spec, saved beside the hparams in every checkpoint. lr,
        weight_decay and betas: GPT-2's recipe, the task's defaults (TASK in __init__.py)."""
        super().__init__()
        betas = list(betas)  # a plain list: hparams.yaml and checkpoints loaded with weights_only=True take it
        self.save_hyperparameters(ignore=["tokenizer"])  # a tokenizer.json is megabytes: not for the loggers
        self.tokenizer = Tokenizer(tokenizer)
        self.net = GPT(vocab_size, layers, heads, width, positions, dropout)
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()

    @classmethod
    def from_config(cls, cfg: Config, opts: LanguageOptions, hw: Hardware, tokenizer: Tokenizer) -> LanguageModel:
        layers, heads, width = opts.shape
        positions = opts.context
        if opts.pretrained:
            shape = pretrained_shape(opts.pretrained, tokenizer, opts.context)
            layers, heads, width, positions = shape["n_layer"], shape["n_head"], shape["n_embd"], shape["n_positions"]
        model = cls(
            vocab_size=tokenizer.vocab_size,
            layers=layers,
            heads=heads,
            width=width,
            positions=positions,
            context=opts.context,
            dropout=opts.dropout,
            tokenizer=tokenizer.spec,
            **run_hparams(cfg, hw),
        )
        if opts.pretrained:
            load_hf_gpt2(model.net, Path(opts.pretrained))
        return model

    def forward(self, idx: Tensor) -> Tensor:
        return self.net(idx)

    def shared_step(self, batch: Batch, stage: str) -> Tensor:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        if stage == "train":
            # on_step only: reading the loss back every step would stall the GPU (monitors.py)
            self.log("train/loss", loss, on_step=True, on_epoch=False)
        else:
            mean: MeanMetric = getattr(self, f"{stage}_loss")
            mean.update(loss.detach(), weight=y.numel())  # weighted by tokens: a smaller last batch counts less
            self.log(f"{stage}/loss", mean, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def on_validation_epoch_end(self) -> None:
        self._log_perplexity("val")

    def on_test_epoch_end(self) -> None:
        self._log_perplexity("test")

    def _log_perplexity(self, stage: str) -> None:
        mean: MeanMetric = getattr(self, f"{stage}_loss")
        if mean.update_called:  # perplexity: e to the mean loss per token, over all ranks' tokens
            self.log(f"{stage}/ppl", torch.exp(mean.compute()), on_epoch=True)

    def count_flops(self, batch_size: int) -> int:
        context = self.hparams["context"]
        per_token = self.net.flops_per_token(context)
        note(f"MFU by PaLM's formula (6N + 12·L·H·Q·T): {per_token / 1e6:.1f} MFLOP per token at context {context}")
        return per_token * batch_size * context

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[TOKENIZER] = self.tokenizer.spec

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if checkpoint.get(TOKENIZER, self.tokenizer.spec) != self.tokenizer.spec:
            self.tokenizer = Tokenizer(checkpoint[TOKENIZER])
