"""A trained checkpoint put to use: loaded safely, wrapped for `trainer.predict`, or for export as one graph.

Both paths run the validation preprocessing of transforms.py (the same decoding, on the CPU or on the device as
`--decode` resolves, the same eval crop) and the classifier's own forward, which normalises with the mean/std the
checkpoint carries. Nothing else is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from ...engine.config import ConfigError
from ...engine.guards import check_checkpoint
from ...engine.hardware import Hardware
from ...engine.loaders import eval_loader
from .images import ImageFiles, collate_bytes, collate_images, decode_encoded, is_encoded, keep_bytes_on_host, max_side
from .module import ImageClassifier
from .transforms import eval_transform

# What predict.py and export.py need from a checkpoint's hparams besides the weights (train.py saves them all).
REQUIRED_HPARAMS = ("model", "class_names", "image_size", "mean", "std", "crop_pct")
# One predicted batch: the images' indices in the input list, their top-k probabilities and class ids.
Predictions = tuple[Tensor, Tensor, Tensor]


def load_classifier(path: str, **overrides: Any) -> ImageClassifier:
    """The classifier in `path`, weights and hparams, on the CPU; `overrides` replace saved hparams (layout, compile).

    Refused in one line: a missing file, one with pickled objects (it is read with weights_only=True, never running
    code from the file), and a checkpoint that is not from this project's train.py."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            "checkpoint", f"no file at {path}; give a .ckpt that train.py wrote, e.g. outputs/checkpoints/last.ckpt"
        )
    # Safe to load (weights_only), readable, Lightning's, no _instantiator; weights suffice, no optimizer state needed.
    checkpoint = check_checkpoint(file, option="checkpoint", training=False)
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    missing = [key for key in REQUIRED_HPARAMS if not isinstance(hparams, dict) or key not in hparams]
    if missing or "state_dict" not in checkpoint:
        what = f"its hparams lack {', '.join(missing)}" if missing else "it has no state_dict"
        raise ConfigError(
            "checkpoint", f"{path} is not a checkpoint of this project's train.py ({what}); give one that is"
        )
    try:
        return ImageClassifier.load_from_checkpoint(file, map_location="cpu", weights_only=True, **overrides)
    except (RuntimeError, KeyError, TypeError, ValueError) as err:  # weights that do not fit the network it names
        reason = str(err).strip().splitlines()[0]
        model = checkpoint["hyper_parameters"]["model"]
        raise ConfigError("checkpoint", f"{path} does not load into {model}: {reason}") from None


def image_files(paths: list[Path], image_size: int, crop_pct: float, mode: str = "decoded") -> ImageFiles:
    """The files as validation reads them: decoded in the loader workers (mode "decoded") or only read there, to be
    decoded on the device ("bytes"), shorter side limited to the same max_side, an unreadable one skipped with a
    warning naming it and the next taking its place.

    Each file's "label" is its position in `paths`, so batches carry which file each image really is: positions can
    repeat where a file was skipped, and the skipped one's is absent."""
    positions = list(range(len(paths)))
    return ImageFiles([str(p) for p in paths], positions, mode=mode, max_side=max_side(image_size, crop_pct))


def predict_loader(paths: list[Path], hparams: Any, hw: Hardware, batch_size: int) -> DataLoader[Any]:
    """Validation's loader for `paths`: where --decode chose "gpu" the workers only read bytes (collate_bytes) and
    Predictor decodes each batch on the device; else they decode (collate_images: padded uint8 batches)."""
    gpu = hw.choices.get("decode") == "gpu"
    files = image_files(paths, hparams["image_size"], hparams["crop_pct"], mode="bytes" if gpu else "decoded")
    # uint8 images or encoded bytes, pinned: an asynchronous copy of 4x fewer bytes than float
    return eval_loader(files, batch_size, hw.num_workers, hw.pin_memory, collate_bytes if gpu else collate_images)


class Predictor(L.LightningModule):
    """`predict_step` for a trained classifier: the validation decoding and crop, class probabilities, the k most
    probable. `paths`: the inputs, by position (the batches' labels), to name a file no decoder can read."""

    def __init__(self, classifier: ImageClassifier, top_k: int, paths: Sequence[str | Path] = ()) -> None:
        super().__init__()
        self.classifier = classifier
        self.top_k = min(top_k, len(classifier.hparams["class_names"]))
        self.paths = [str(p) for p in paths]

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if is_encoded(batch):  # as ImageDataModule's: the bytes stay in pinned host memory, nvJPEG reads them there
            return keep_bytes_on_host(batch, device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def configure_model(self) -> None:
        self.classifier.configure_model()  # torch.compile, when the resolved hardware says so

    def predict_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int) -> Predictions:
        hp = self.classifier.hparams
        if is_encoded(batch):  # decoded here, as validation does: a file no decoder can read is dropped, not replaced
            batch = decode_encoded(batch, max_side(hp["image_size"], hp["crop_pct"]), fill=False, names=self.paths)
        images, sizes, index = batch
        if len(index) == 0:  # every file of the batch was unreadable
            return index.cpu(), torch.empty(0, self.top_k), torch.empty(0, self.top_k, dtype=torch.long)
        x = eval_transform(images, sizes, hp["image_size"], hp["crop_pct"])
        if hp["channels_last"]:
            x = x.contiguous(memory_format=torch.channels_last)
        top = self.classifier(x).float().softmax(dim=-1).topk(self.top_k, dim=-1)
        # Back to the host per batch: the loop would otherwise keep every batch's outputs on the device.
        return index.cpu(), top.values.cpu(), top.indices.cpu()


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
