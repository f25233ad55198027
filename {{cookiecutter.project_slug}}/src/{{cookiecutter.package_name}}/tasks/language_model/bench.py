"""The language model's rows of bench.py: tokens/s, MFU and peak memory for precision x compile x activation
checkpointing, and a hand-written PyTorch loop on the same model and batches, whose ratio is what Lightning costs.

Token batches are on the device before the clock starts, so the loader is not measured (it reads memory-mapped
shards, far faster than any GPU trains). MFU counts PaLM's FLOPs (6N + 12·L·H·Q·T per token) against the dense
peak of the engine's perf/peaks.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning_gpu_engine import Config, Hardware, no_decay_names, parse_betas, run_hparams, warmup_cosine
from lightning_gpu_engine.bench import Clock, Spec, Timing, prepare, time_fit

from . import TASK
from .config import SIZES
from .gpt import GPT
from .module import LanguageModel


@dataclass(frozen=True)
class LMSetting:
    precision: str  # as Lightning's Trainer takes it
    compile: bool
    fsdp_ac: bool  # FSDP2 with activation checkpointing: what lets a model too big for plain training fit
    model: str = ""  # another size than the spec's ("gpt2-xl"); "" = the spec's

    @property
    def name(self) -> str:
        base = {"bf16-mixed": "bf16", "bf16-true": "bf16-true", "16-mixed": "fp16"}.get(self.precision, "fp32")
        size = f"{self.model} " if self.model else ""
        return size + base + "+compile" * self.compile + "+fsdp+ac" * self.fsdp_ac


@dataclass(frozen=True, kw_only=True)
class LMSpec(Spec):
    model: str
    context: int
    vocab_size: int

    def config(self, setting: LMSetting, output_dir: Path) -> Config:
        """train.py's options for this setting: the task's recipe (GPT-2's AdamW and clipping) included."""
        # the task's defaults (its recipe and the project's answers), then what this setting measures in their place
        return Config(
            **TASK.default_values
            | dict(
                accelerator=self.device,
                devices="1",
                strategy="fsdp" if setting.fsdp_ac else "auto",
                activation_checkpointing=setting.fsdp_ac,
                precision=setting.precision,
                compile=setting.compile,
                batch_size=self.batch_size,
                num_workers=0,  # DeviceTokens need none
                max_epochs=1,
                max_steps=self.warmup + self.steps,
                logger="csv",
                output_dir=str(output_dir),
            )
        )

    def network(self, setting: LMSetting) -> GPT:
        layers, heads, width = SIZES[setting.model or self.model]
        return GPT(self.vocab_size, layers, heads, width, self.context)

    def module(self, setting: LMSetting, cfg: Config, hw: Hardware) -> LanguageModel:
        layers, heads, width = SIZES[setting.model or self.model]
        hparams = run_hparams(cfg, hw)
        return LanguageModel(self.vocab_size, layers, heads, width, self.context, self.context, **hparams)

    def flops_per_token(self, setting: LMSetting) -> int:
        with torch.device("meta"):
            return self.network(setting).flops_per_token(self.context)


class DeviceTokens:
    """`length` batches of (inputs, targets) cycled from a few random token batches that stay on the device."""

    def __init__(self, spec: LMSpec, length: int, distinct: int = 4) -> None:
        shape = (distinct, spec.batch_size, spec.context + 1)
        self.tokens = torch.randint(0, spec.vocab_size, shape, device=spec.device)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(self.length):
            window = self.tokens[i % len(self.tokens)]
            yield window[:, :-1], window[:, 1:]


class DeviceData(L.LightningDataModule):
    def __init__(self, batches: DeviceTokens) -> None:
        super().__init__()
        self.batches = batches

    def train_dataloader(self) -> Any:
        return self.batches


def run_lightning(spec: LMSpec, setting: LMSetting, output_dir: Path) -> Timing:
    """LanguageModel through the engine's Trainer, as train.py builds it."""
    cfg = spec.config(setting, output_dir)
    hw = prepare(cfg, fsdp2=TASK.fsdp2, channels_last=TASK.channels_last)
    return time_fit(
        spec, cfg, hw, spec.module(setting, cfg, hw), DeviceData(DeviceTokens(spec, spec.warmup + spec.steps)), TASK
    )


def run_plain(spec: LMSpec, setting: LMSetting, output_dir: Path) -> Timing:
    """The same network, batches, optimizer (groups, betas, clipping), schedule, precision and compile, hand-written
    the way a careful PyTorch user would (nanoGPT's loop): no host-device synchronization inside the timed steps."""
    cfg = spec.config(setting, output_dir)
    hw = prepare(cfg, fsdp2=TASK.fsdp2, channels_last=TASK.channels_last)
    device = torch.device(spec.device)
    net = spec.network(setting).to(device)
    no_decay = no_decay_names(net)
    if hw.precision == "bf16-true":
        net = net.to(torch.bfloat16)
    if hw.compile:
        net.compile(mode=cfg.compile_mode, dynamic=False)  # as EngineModule.configure_model does
    groups = [
        {"params": [p for n, p in net.named_parameters() if n not in no_decay], "weight_decay": cfg.weight_decay},
        {"params": [p for n, p in net.named_parameters() if n in no_decay], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=parse_betas(cfg.betas), fused=device.type == "cuda")
    total = spec.warmup + spec.steps
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total, int(cfg.warmup_fraction * total)))
    autocast = torch.autocast(device.type, torch.bfloat16) if hw.precision == "bf16-mixed" else nullcontext()
    clock = Clock(spec)
    clock.tick(0)
    for done, (x, y) in enumerate(DeviceTokens(spec, total), start=1):
        with autocast:
            loss = F.cross_entropy(net(x).flatten(0, 1), y.flatten())
        loss.backward()
        if cfg.gradient_clip_val:  # as nanoGPT clips, and the engine does before its optimizer step
            torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.gradient_clip_val)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        clock.tick(done)
    return clock.timing()
