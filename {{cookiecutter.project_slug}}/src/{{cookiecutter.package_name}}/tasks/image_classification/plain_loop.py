"""The hand-written PyTorch loop that bench.py holds the Lightning product against, written as a careful user would."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ...bench.harness import Clock, DeviceBatches, Setting, Spec, Timing, prepare
from ...engine.monitors import HALF
from .data import MEAN, STD, random_crop_flip
from .module import build_network


def run_plain(spec: Spec, setting: Setting, output_dir: Path) -> Timing:
    """The same network, data, augmentation, optimizer, schedule, precision, compile and memory format, hand-written
    the way a careful PyTorch user would: no host-device synchronization, accuracy counted on the device."""
    cfg, _, hw = prepare(spec, setting, output_dir)
    device = torch.device(spec.device)
    torch.backends.cudnn.benchmark = hw.cudnn_benchmark  # what Trainer(benchmark=...) sets
    net = build_network(spec.model, spec.num_classes, spec.image_size).to(device)
    if hw.channels_last:
        net = net.to(memory_format=torch.channels_last)
    if hw.compile:
        net.compile(mode=cfg.compile_mode, dynamic=False)  # as ImageClassifier.configure_model does
    params = list(net.parameters())
    groups = [
        {"params": [p for p in params if p.ndim > 1], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, fused=device.type == "cuda")
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=spec.warmup + spec.steps)
    half = HALF.get(hw.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=half is torch.float16)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    correct = torch.zeros((), dtype=torch.long, device=device)
    clock = Clock(spec)
    clock.tick(0)
    for done, (images, labels) in enumerate(DeviceBatches(spec, spec.warmup + spec.steps), start=1):
        # ImageDataModule.on_after_batch_transfer in training and the normalisation, written out
        x = random_crop_flip(images.float(), pad=max(1, spec.image_size // 8))
        x = (x - mean) / std
        if hw.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=half or torch.float32, enabled=half is not None):
            logits = net(x)
            loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        schedule.step()
        correct += (logits.argmax(1) == labels).sum()
        clock.tick(done)
    return clock.timing()
