"""bench.py's predict rows: predict.py's path (Trainer.predict, Predictor) against a plain torch.inference_mode loop.

Both read the same JPEG files through the same loader (CPU decode in workers, padded uint8 batches, pinned with
CUDA), apply the same eval crop on the device and run the same network with the same precision, layout and compile.
The only difference is Lightning around the loop, so their ratio is what Lightning costs at inference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from ...bench.harness import Clock, Setting, Spec, Timing, prepare
from ...engine.config import Config
from ...engine.hardware import Hardware
from ...engine.monitors import HALF
from ...engine.trainer import build_trainer
from .inference import Predictor, predict_loader
from .module import ImageClassifier
from .sources import list_images
from .transforms import eval_transform


def _setup(
    spec: Spec, setting: Setting, output_dir: Path, folder: Path
) -> tuple[Config, Hardware, ImageClassifier, DataLoader[Any]]:
    cfg, opts, hw = prepare(spec, setting, output_dir)
    classifier = ImageClassifier.from_config(cfg, opts, hw, [f"class{i}" for i in range(spec.num_classes)]).eval()
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


def run_predict(spec: Spec, setting: Setting, output_dir: Path, folder: Path) -> Timing:
    """predict.py's path: the Trainer train.py builds, Predictor's predict_step, top-5 back on the host."""
    cfg, hw, classifier, loader = _setup(spec, setting, output_dir, folder)
    clock = Clock(spec)
    trainer = build_trainer(
        cfg, hw, callbacks=[_Ticks(clock)], logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.predict(Predictor(classifier, top_k=5), dataloaders=loader, return_predictions=True)
    return clock.timing()


def run_plain_predict(spec: Spec, setting: Setting, output_dir: Path, folder: Path) -> Timing:
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
