"""predict.py's parts: which files to label, a checkpoint loaded safely, the predict step run through the Trainer
with the validation preprocessing (the same decoding, on the CPU or on the device as `--decode` resolves, the same
eval crop), and the CSV/JSONL rows written all at once or not at all."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import lightning as L
import torch
from lightning_gpu_engine import ConfigError, Hardware, check_checkpoint, eval_loader
from torch import Tensor
from torch.utils.data import DataLoader

from .images import ImageFiles, collate_bytes, collate_images, decode_encoded, is_encoded, keep_bytes_on_host, max_side
from .module import ImageClassifier
from .sources import IMAGE_SUFFIXES, list_images
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
    if not file.exists():
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
        source: Path | io.BytesIO = file
        if not file.is_file():  # a sharded folder (--checkpoint-format sharded): the one file it makes, in memory
            source = io.BytesIO()
            torch.save(checkpoint, source)
            source.seek(0)
        return ImageClassifier.load_from_checkpoint(source, map_location="cpu", weights_only=True, **overrides)
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


class InputError(ValueError):
    """An INPUT that names no images: told in one line, like a bad flag."""


def _listed(list_file: Path) -> list[Path]:
    """Paths in a text file, one per line (blank lines and # comments skipped); relative to the list's folder."""
    try:
        lines = list_file.read_text().splitlines()
    except UnicodeDecodeError:
        raise InputError(
            f"{list_file} is neither an image ({'/'.join(IMAGE_SUFFIXES)}) nor a text file of paths"
        ) from None
    entries = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not entries:
        raise InputError(f"{list_file} lists no image paths; give one path per line")
    paths = [Path(entry) if Path(entry).is_absolute() else list_file.parent / entry for entry in entries]
    for entry, path in zip(entries, paths, strict=True):
        if not path.is_file():
            raise InputError(f"{list_file} lists {entry}, but there is no file at {path}")
    return paths


def collect_images(inputs: Sequence[str]) -> list[Path]:
    """Every image named by the inputs, in order: files as given, folders searched recursively (sorted), lists."""
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            images = [Path(p) for p in list_images(path)[0]]  # as training lists a class: any depth, each file once
            if not images:
                raise InputError(f"no images in {item} or its subfolders; looked for {'/'.join(IMAGE_SUFFIXES)}")
            found += images
        elif path.is_file():
            found += [path] if path.suffix.lower() in IMAGE_SUFFIXES else _listed(path)
        else:
            raise InputError(f"{item}: no such file or folder; give images, folders of images or lists of paths")
    return found


Row = tuple[str, list[tuple[str, float]]]  # path, then (class, probability) for the top k, most probable first


def write_rows(handle: IO[str], rows: list[Row], jsonl: bool) -> None:
    """CSV: path, predicted, then class_1, prob_1, ... class_k, prob_k. JSONL: the same as one object per line."""
    k = len(rows[0][1]) if rows else 0
    if jsonl:
        for path, top in rows:
            entry = {"path": path, "predicted": top[0][0], "top_k": [{"class": c, "probability": p} for c, p in top]}
            handle.write(json.dumps(entry) + "\n")
        return
    writer = csv.writer(handle)
    writer.writerow(["path", "predicted", *(f"{name}_{i}" for i in range(1, k + 1) for name in ("class", "prob"))])
    for path, top in rows:
        writer.writerow([path, top[0][0], *(v for c, p in top for v in (c, f"{p:.6f}"))])


def summary(rows: list[Row], skipped: int, seconds: float, output: str) -> str:
    counts = Counter(top[0][0] for _, top in rows).most_common(5)
    common = ", ".join(f"{name} {n}" for name, n in counts)
    rate = f"{len(rows) / seconds:.0f} img/s" if seconds > 0 else "n/a"
    unreadable = f", {skipped} unreadable skipped" if skipped else ""
    return f"predicted {len(rows)} images{unreadable} in {seconds:.1f} s ({rate}) -> {output}; most often: {common}"
