"""The image task's rows of bench.py: the product and a hand-written PyTorch loop on the same batches, predict.py's
path and a plain inference loop on the same JPEGs, and the loader by source, decoder, workers and pinning.

Training batches are on the device before the clock starts, so neither the loader nor the host-to-device copy is
measured; the device-side augmentation of ImageDataModule is, as it runs on the device in every training step. The
plain loops differ from the product only by Lightning around them, so each ratio is what Lightning costs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning_gpu_engine import HALF, Config, Hardware, build_trainer, parse_betas
from lightning_gpu_engine.bench import (
    TIMED_BATCHES,
    Clock,
    Row,
    Setting,
    Spec,
    Timing,
    prepare,
    samples_per_second,
    time_fit,
    worker_counts,
)
from torch.utils.data import DataLoader

from .config import ImageOptions
from .data import ImageDataModule
from .decoding import torchcodec_available
from .module import ImageClassifier
from .networks import build_network, preprocessing
from .predict import Predictor, predict_loader
from .sources import list_images, write_photos
from .transforms import eval_transform, random_crop_flip


@dataclass(frozen=True, kw_only=True)
class ImageSpec(Spec):
    model: str
    image_size: int
    num_classes: int = 6  # the synthetic shapes

    def config(self, setting: Setting, output_dir: Path) -> tuple[Config, ImageOptions]:
        cfg = Config(
            accelerator=self.device,
            devices="1",
            strategy="auto",
            precision=setting.precision,
            tf32=setting.tf32,
            channels_last=setting.channels_last,
            compile=setting.compile,
            batch_size=self.batch_size,
            num_workers=None,  # the default, which only the folder runs use: DeviceBatches need no workers
            max_epochs=1,
            max_steps=self.warmup + self.steps,
            logger="tensorboard",
            output_dir=str(output_dir),
        )
        return cfg, ImageOptions(model=self.model, image_size=self.image_size)

    @property
    def classes(self) -> list[str]:
        return [f"class{i}" for i in range(self.num_classes)]


def prepared(spec: ImageSpec, setting: Setting, output_dir: Path) -> tuple[Config, ImageOptions, Hardware]:
    cfg, opts = spec.config(setting, output_dir)
    return cfg, opts, prepare(cfg)


class DeviceBatches:
    """`length` batches cycled from a few random uint8 batches that stay on the device."""

    def __init__(self, spec: ImageSpec, length: int, distinct: int = 4) -> None:
        shape = (distinct, spec.batch_size, 3, spec.image_size, spec.image_size)
        self.images = torch.randint(0, 256, shape, dtype=torch.uint8, device=spec.device)
        self.labels = torch.randint(0, spec.num_classes, shape[:2], device=spec.device)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(self.length):
            yield self.images[i % len(self.images)], self.labels[i % len(self.labels)]


class DeviceData(ImageDataModule):
    """The product's DataModule, device-side augmentation included, with its loaders swapped for DeviceBatches."""

    batches: DeviceBatches

    def setup(self, stage: str) -> None:
        pass

    def train_dataloader(self) -> Any:
        return self.batches


def run_lightning(
    spec: ImageSpec, setting: Setting, output_dir: Path, folder: Path | None = None, decode: str = "cpu"
) -> Timing:
    """ImageClassifier through the engine's Trainer. With `folder`, the batches come from the JPEGs there through the
    real loader (default worker count), decoded by `decode` ("cpu" or "gpu"): real-data speed, end to end. Without,
    from DeviceBatches: the training alone."""
    cfg, opts, hw = prepared(spec, setting, output_dir)
    data: ImageDataModule
    if folder is None:
        data = DeviceData(image_size=spec.image_size, batch_size=spec.batch_size, channels_last=bool(hw.channels_last))
        data.batches = DeviceBatches(spec, spec.warmup + spec.steps)
    else:
        data = ImageDataModule(
            data="folder",
            data_dir=str(folder),
            image_size=spec.image_size,
            batch_size=spec.batch_size,
            num_workers=hw.num_workers,
            pin_memory=hw.pin_memory,
            channels_last=bool(hw.channels_last),
            decode=decode,
        )
    return time_fit(spec, cfg, hw, ImageClassifier.from_config(cfg, opts, hw, spec.classes), data)


def flops_per_batch(spec: ImageSpec) -> int:
    """Forward and backward FLOPs of one batch, counted as the training run counts them (EngineModule)."""
    return ImageClassifier(spec.model, spec.classes, spec.image_size).count_flops(spec.batch_size)


def run_plain(spec: ImageSpec, setting: Setting, output_dir: Path) -> Timing:
    """The same network, data, augmentation, optimizer, schedule, precision, compile and memory format, hand-written
    the way a careful PyTorch user would: no host-device synchronization, accuracy counted on the device."""
    cfg, _, hw = prepared(spec, setting, output_dir)
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
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=parse_betas(cfg.betas), fused=device.type == "cuda")
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=spec.warmup + spec.steps)
    half = HALF.get(hw.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=half is torch.float16)
    own = preprocessing(None)  # the module's own normalisation (0-255 scale)
    mean = torch.tensor(own["mean"], device=device).view(1, 3, 1, 1)
    std = torch.tensor(own["std"], device=device).view(1, 3, 1, 1)
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


def _setup(
    spec: ImageSpec, setting: Setting, output_dir: Path, folder: Path
) -> tuple[Config, Hardware, ImageClassifier, DataLoader[Any]]:
    cfg, opts, hw = prepared(spec, setting, output_dir)
    classifier = ImageClassifier.from_config(cfg, opts, hw, spec.classes).eval()
    paths = [Path(p) for p in list_images(folder / "train")[0]][: spec.batch_size * (spec.warmup + spec.steps)]
    loader = predict_loader(paths, classifier.hparams, hw, spec.batch_size)  # predict.py's, decoded by the workers
    return cfg, hw, classifier, loader


class _Ticks(L.Callback):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.clock.tick(0)

    def on_predict_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.clock.tick(args[-1] + 1)  # batch_idx + 1 batches done


def run_predict(spec: ImageSpec, setting: Setting, output_dir: Path, folder: Path) -> Timing:
    """predict.py's path: the Trainer train.py builds, Predictor's predict_step, top-5 back on the host."""
    cfg, hw, classifier, loader = _setup(spec, setting, output_dir, folder)
    clock = Clock(spec)
    trainer = build_trainer(
        cfg, hw, callbacks=[_Ticks(clock)], logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.predict(Predictor(classifier, top_k=5), dataloaders=loader, return_predictions=True)
    return clock.timing()


def run_plain_predict(spec: ImageSpec, setting: Setting, output_dir: Path, folder: Path) -> Timing:
    """The same, hand-written: inference_mode, autocast, non-blocking copies, top-5 back on the host."""
    _, hw, classifier, loader = _setup(spec, setting, output_dir, folder)
    device = torch.device(spec.device)
    torch.backends.cudnn.benchmark = hw.cudnn_benchmark
    net = classifier.to(device)
    net.configure_model()  # compiles the network when the setting says so, as under the Trainer
    half = HALF.get(hw.precision)
    clock = Clock(spec)
    clock.tick(0)
    with torch.inference_mode() if not hw.compile else torch.no_grad():  # as build_trainer chooses
        for done, (images, sizes, _) in enumerate(loader, start=1):
            crop_pct = classifier.hparams["crop_pct"]
            x = eval_transform(images.to(device, non_blocking=True), sizes.to(device), spec.image_size, crop_pct)
            if hw.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(device.type, dtype=half or torch.float32, enabled=half is not None):
                top = net(x).float().softmax(dim=-1).topk(5, dim=-1)
            _ = top.values.cpu(), top.indices.cpu()
            clock.tick(done)
    return clock.timing()


def loader_rows(
    device: torch.device, spec: ImageSpec, cpus: int, workdir: Path, on_row: Callable[[Row], None] = lambda row: None
) -> list[Row]:
    """Synthetic, folder JPEGs decoded by the workers, and (CUDA with TorchCodec) decoded on the GPU; each row goes
    to `on_row` as soon as it is measured."""
    counts = worker_counts(cpus)
    samples = spec.batch_size * (max(counts) + 1 + TIMED_BATCHES)
    write_photos(workdir / "loader-photos", samples)
    decoders = ["cpu"] + (["gpu"] if device.type == "cuda" and torchcodec_available() else [])
    size, batch = spec.image_size, spec.batch_size
    sources = {"synthetic": ImageDataModule(image_size=size, batch_size=batch, train_samples=samples)}
    for decode in decoders:
        folder = str(workdir / "loader-photos")
        sources[f"folder {decode}-decode"] = ImageDataModule(
            data="folder", data_dir=folder, image_size=size, batch_size=batch, decode=decode
        )
    rows: list[Row] = []
    for name, base in sources.items():
        base.setup("fit")
        for pinned in (False, True) if device.type == "cuda" else (False,):
            for workers in counts:
                speed = samples_per_second(base, workers, pinned, device)
                rows.append({"data": name, "workers": workers, "pin_memory": pinned, "samples_per_s": speed})
                on_row(rows[-1])
    return rows
