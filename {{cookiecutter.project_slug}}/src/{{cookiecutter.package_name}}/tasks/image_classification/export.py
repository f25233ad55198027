"""Export a trained classifier as one graph (ServingModel) and prove it computes what PyTorch does.

The file is written under a hidden partial name beside the output (files.py), run on images it was not traced with
(another batch size, another image size), compared with the PyTorch model, and only then renamed into place.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path
from typing import IO

import torch
from lightning_gpu_engine import ConfigError, discard, open_output, publish
from torch import Tensor, nn

from .config import ExportConfig
from .module import ImageClassifier
from .transforms import eval_transform

SUFFIXES = {"onnx": ".onnx", "torch-export": ".pt2"}
# The class of each logit, as a JSON list, inside the file: ONNX metadata_props, or an extra file of the .pt2 archive.
CLASS_NAMES = "class_names"


class ServingModel(nn.Module):
    """uint8 (N, 3, H, W) images of any size -> logits: the eval crop, normalisation and network as one graph.

    A serving process needs nothing of this project: it sends the decoded images and gets one logit per class."""

    def __init__(self, classifier: ImageClassifier) -> None:
        super().__init__()
        self.classifier = classifier
        self.image_size, self.crop_pct = int(classifier.hparams["image_size"]), float(classifier.hparams["crop_pct"])
        self.class_names = [str(name) for name in classifier.hparams["class_names"]]

    def forward(self, images: Tensor) -> Tensor:
        # Sizes by tensor arithmetic on the shape, so that N, H and W stay symbolic in the exported graph.
        ones = torch.ones(images.shape[0], 1, device=images.device)
        sizes = torch.cat([ones * images.shape[2], ones * images.shape[3]], dim=1)
        return self.classifier(eval_transform(images, sizes, self.image_size, self.crop_pct))


class ParityError(RuntimeError):
    """The exported graph's logits differ from PyTorch's by more than the tolerance."""


def output_path(cfg: ExportConfig) -> Path:
    path = Path(cfg.output) if cfg.output else Path(cfg.checkpoint).with_suffix(SUFFIXES[cfg.format])
    if path.is_dir():
        raise ConfigError("output", f"{path} is a folder; give a file path ending in {SUFFIXES[cfg.format]}")
    named = next((fmt for fmt, suffix in SUFFIXES.items() if path.suffix.lower() == suffix), cfg.format)
    if named != cfg.format:  # a server picks the loader by the suffix: an ONNX file named .pt2 fails there, later
        raise ConfigError(
            "output",
            f"{path.name} is named for {named}, not {cfg.format}: name it {path.stem}{SUFFIXES[cfg.format]}, "
            f"or pass --format {named}",
        )
    return path  # its folder, and whether it can be written: files.open_output, with the other outputs


def sample_batches(serving: ServingModel) -> tuple[Tensor, list[Tensor]]:
    """The batch the graph is traced with, and the ones it is checked on: other batch sizes and image sizes."""
    side = round(serving.image_size / serving.crop_pct)  # the size the eval crop resizes to: a typical input
    generator = torch.Generator().manual_seed(0)

    def batch(n: int, h: int, w: int) -> Tensor:
        return torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8, generator=generator)

    return batch(2, side + 5, side + 11), [
        batch(2, side + 5, side + 11),
        batch(5, side, side),
        batch(1, side * 2, side + 3),
    ]


def _dynamic_shapes() -> dict[str, dict[int, torch.export.Dim]]:
    dim = torch.export.Dim
    return {
        "images": {
            0: dim("batch", min=1, max=4096),
            2: dim("height", min=2, max=16384),
            3: dim("width", min=2, max=16384),
        }
    }


def _export_onnx(serving: ServingModel, example: Tensor, checks: list[Tensor], path: Path) -> list[Tensor]:
    """Through the torch.export-based exporter; checked in ONNX Runtime, as a serving process would run it."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():  # the exporter narrates every step
        # roi_align's sampling_ratio -1 (adaptive) is what ONNX RoiAlign calls 0: the warning is about nothing.
        warnings.filterwarnings("ignore", message="ONNX export for RoIAlign with a non-zero sampling_ratio")
        program = torch.onnx.export(
            serving,
            (example,),
            dynamo=True,
            input_names=["images"],
            output_names=["logits"],
            dynamic_shapes=_dynamic_shapes(),
            external_data=False,
        )
    assert program is not None
    program.model.metadata_props[CLASS_NAMES] = json.dumps(serving.class_names)
    program.save(str(path))
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [torch.from_numpy(session.run(None, {"images": b.numpy()})[0]) for b in checks]


def _export_program(serving: ServingModel, example: Tensor, checks: list[Tensor], path: Path) -> list[Tensor]:
    program = torch.export.export(serving, (example,), dynamic_shapes=_dynamic_shapes())
    torch.export.save(program, str(path), extra_files={CLASS_NAMES: json.dumps(serving.class_names)})
    loaded = torch.export.load(str(path)).module()  # the round trip a serving process makes
    with torch.no_grad():
        return [loaded(b) for b in checks]


def open_export(cfg: ExportConfig) -> IO[str]:
    """The partial file of the export (files.open_output), opened before any work: a bad --output answers at once."""
    return open_output(output_path(cfg), "output", SUFFIXES[cfg.format])  # exporters want their suffix


def export(cfg: ExportConfig, serving: ServingModel, lock: IO[str]) -> tuple[Path, float, float]:
    """Write the export of `serving` through `lock` (open_export's) to the output path; return it, the largest logit
    difference and the bound."""
    path = output_path(cfg)
    try:
        serving = serving.eval()
        example, checks = sample_batches(serving)
        with torch.no_grad():
            expected = [serving(b) for b in checks]
        writer = _export_onnx if cfg.format == "onnx" else _export_program
        got = writer(serving, example, checks, Path(lock.name))
        diff = max(float((g - e).abs().max()) for g, e in zip(got, expected, strict=True))
        bound = cfg.tolerance * max(1.0, max(float(e.abs().max()) for e in expected))
        if not diff <= bound:
            raise ParityError(
                f"the {cfg.format} export differs from PyTorch by {diff:.3g} (> {bound:.3g}); not written"
            )
        publish(Path(lock.name), path)
    finally:  # also on Ctrl-C, SIGTERM and SIGHUP (the engine's tools/signals.py): nothing half-written stays
        discard(lock)
    return path, diff, bound
