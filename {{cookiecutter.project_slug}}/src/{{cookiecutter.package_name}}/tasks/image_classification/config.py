"""The image task's options, each with its default and why: train.py's beside the engine's `Config`, and the whole
of predict.py's, export.py's and prepare_data.py's. Each of the latter checks the files it names in `check_inputs`
(parse_options calls it), as train.py's task does in inputs.py: before torch loads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_gpu_engine import (
    Config,
    ConfigError,
    check_choices,
    check_input,
    check_path,
    opt,
    parse_chunk_bytes,
)

DATA_SOURCES = ("synthetic", "cifar10", "folder", "streaming")
DECODERS = ("auto", "cpu", "gpu")
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 16, 4096  # below 16 px a ResNet's last stage sees less than a pixel


@dataclass
class ImageOptions:
    # --- data ------------------------------------------------------------------------------
    data: str = opt(
        "synthetic",
        "synthetic: generated, no download; folder: your images; streaming: prepare_data.py's chunks",
        DATA_SOURCES,
    )
    data_dir: str = opt(
        "data", "where cifar10 is downloaded, the folder with train/ val/ [test/], or the chunks' folder or s3:// URL"
    )
    cache_dir: str | None = opt(
        None, "streaming from s3://: where LitData keeps each split's index (KBs); unset = $TMPDIR/litdata (node-local)"
    )
    image_size: int = opt(64, "side of the square images fed to the network")
    train_samples: int = opt(10_000, "synthetic: training images (val and test get a fifth each)")
    decode: str = opt(
        "auto",
        "folder JPEGs: gpu = nvJPEG in batches, workers only read bytes; auto = gpu with CUDA + TorchCodec",
        DECODERS,
    )
    # --- network -----------------------------------------------------------------------------
    model: str = opt("resnet18", "a torchvision classifier (resnet50), or timm/<name> (timm/convnext_tiny.fb_in22k)")
    pretrained: str | None = opt(
        None,
        "start from pretrained weights: alone = the model's default ones (downloaded once, then cached); "
        "or a .pt/.pth/.safetensors state_dict file",
        const="default",
    )
    backbone_lr_scale: float = opt(0.1, "with --pretrained: backbone peak LR = --lr x this; the new head's = --lr")
    freeze_epochs: int = opt(1, "with --pretrained: epochs training only the new head (backbone, its BatchNorm frozen)")

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("data_dir", "pretrained", "cache_dir"):
            check_path(name, getattr(self, name))
        if self.train_samples < 1:
            raise ConfigError("train_samples", f"must be a positive integer, got {self.train_samples}")
        if not MIN_IMAGE_SIZE <= self.image_size <= MAX_IMAGE_SIZE:
            raise ConfigError(
                "image_size", f"must be from {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE} px, got {self.image_size}"
            )
        if self.backbone_lr_scale <= 0:
            raise ConfigError("backbone_lr_scale", f"must be positive, got {self.backbone_lr_scale}")
        if self.freeze_epochs < 0:
            raise ConfigError("freeze_epochs", f"must be 0 or more, got {self.freeze_epochs}")


# predict.py and export.py: their options, in the same form; the hardware ones are train.py's own
OUTPUT_SUFFIXES = (".csv", ".jsonl")
CHECKPOINT = "a .ckpt that train.py wrote, e.g. outputs/checkpoints/last.ckpt"
EXPORT_FORMATS = ("onnx", "torch-export")
HARDWARE_OPTIONS = ("accelerator", "devices", "precision", "compile", "compile_mode", "channels_last", "tf32")


def as_in_training(name: str) -> Any:
    """Config's field, default and reason included, so predict.py resolves the hardware exactly as train.py does."""
    return field(default=Config.__dataclass_fields__[name].default, metadata=Config.__dataclass_fields__[name].metadata)


@dataclass
class PredictConfig:
    inputs: tuple[str, ...] = opt((), "images, folders (searched recursively), text files of paths", positional=True)
    checkpoint: str = opt("", "a .ckpt from train.py: it carries the class names and the preprocessing")
    output: str = opt("predictions.csv", "one row per image; .csv or .jsonl, chosen by the suffix")
    top_k: int = opt(5, "most probable classes listed per image; capped at the number of classes")
    batch_size: int = opt(128, "images per device per step")
    num_workers: int | None = opt(None, "loader processes per device; unset = CPUs per device - 1 (SLURM-aware)")
    decode: str = opt(
        "auto",
        "gpu = nvJPEG in batches on the device, workers only read bytes; auto = gpu with CUDA + TorchCodec and "
        "mostly JPEG inputs",
        DECODERS,
    )
    accelerator: str = as_in_training("accelerator")
    devices: str = as_in_training("devices")
    precision: str = as_in_training("precision")
    compile: bool | None = as_in_training("compile")
    compile_mode: str = as_in_training("compile_mode")
    channels_last: bool | None = as_in_training("channels_last")
    tf32: bool = as_in_training("tf32")

    def __post_init__(self) -> None:
        check_choices(self)
        self.inputs = tuple(self.inputs)
        if not self.checkpoint:
            raise ConfigError("checkpoint", "required: a .ckpt written by train.py, e.g. outputs/checkpoints/last.ckpt")
        for name in ("checkpoint", "output"):
            check_path(name, getattr(self, name))
        if not self.output.endswith(OUTPUT_SUFFIXES):
            raise ConfigError("output", f"{self.output!r} must end in {' or '.join(OUTPUT_SUFFIXES)}")
        if Path(self.output).is_dir():  # found now, not after every image is predicted
            raise ConfigError("output", f"{self.output} is a folder; give a file in it, e.g. {self.output}/labels.csv")
        for name in ("top_k", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be 1 or more, got {getattr(self, name)}")
        if self.num_workers is not None and self.num_workers < 0:
            raise ConfigError("num_workers", f"must be 0 or more, got {self.num_workers}")

    def check_inputs(self) -> None:
        check_input("checkpoint", self.checkpoint, CHECKPOINT)
        for item in self.inputs:
            if not Path(item).exists():
                raise ConfigError(
                    "INPUT", f"{item}: no such file or folder; give images, folders of images or lists of paths"
                )

    def training_config(self) -> Config:
        """The hardware options as train.py's Config, for hardware.resolve and the Trainer it builds."""
        chosen = {name: getattr(self, name) for name in HARDWARE_OPTIONS}
        # One process per device at most, no FSDP (nothing to shard for inference), no tracker to start.
        chosen.update(batch_size=self.batch_size, num_workers=self.num_workers)
        return Config(**chosen, strategy="auto", logger="csv")


@dataclass
class ExportConfig:
    checkpoint: str = opt("", "a .ckpt from train.py: it carries the class names and the preprocessing")
    format: str = opt("onnx", "onnx: ONNX Runtime and most servers; torch-export: a .pt2 for PyTorch", EXPORT_FORMATS)
    output: str | None = opt(None, "unset = the checkpoint's path with .onnx or .pt2")
    tolerance: float = opt(1e-3, "largest accepted |logit difference| from PyTorch, times max(1, largest |logit|)")

    def __post_init__(self) -> None:
        check_choices(self)
        if not self.checkpoint:
            raise ConfigError("checkpoint", "required: a .ckpt written by train.py, e.g. outputs/checkpoints/last.ckpt")
        for name in ("checkpoint", "output"):
            check_path(name, getattr(self, name))
        if not self.tolerance > 0:
            raise ConfigError("tolerance", f"must be positive, got {self.tolerance}")

    def check_inputs(self) -> None:
        check_input("checkpoint", self.checkpoint, CHECKPOINT)


@dataclass
class PrepareOptions:
    data_dir: str = opt("data", "the image folder: train/ and val/ [and test/], one folder per class in each")
    output: str = opt("chunks", "a local folder or s3://bucket/prefix (AWS_ENDPOINT_URL for other S3 servers)")
    chunk_bytes: str = opt("64MB", "target chunk size, with its unit (KB, MB, GB): LitData's advice; read by ranges")
    num_workers: int = opt(0, "writer processes; 0 = in this process (a few thousand images a second)")

    def __post_init__(self) -> None:
        for name in ("data_dir", "output"):
            check_path(name, getattr(self, name))
        if self.num_workers < 0:
            raise ConfigError("num_workers", f"must be 0 or more, got {self.num_workers}")
        parse_chunk_bytes(self.chunk_bytes)

    def check_inputs(self) -> None:
        from .inputs import class_folders

        class_folders(Path(self.data_dir))
