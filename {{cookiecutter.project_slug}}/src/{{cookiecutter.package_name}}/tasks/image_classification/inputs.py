"""The image task's files, checked before torch and Lightning load (`Task.check_inputs`): a mistyped --data-dir or
--pretrained answers in a fraction of a second, not after seconds of imports. The DataModule and the network read the
same files again and check what needs their contents (readable images, intact CIFAR-10 pickles, matching tensors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_gpu_engine import Config, ConfigError

LIBRARY = "default"  # what a bare --pretrained means: the architecture's default pretrained weights
SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")  # --pretrained files (a .ckpt may be a sharded folder)


def class_folders(root: Path) -> list[str]:
    """--data folder: the class names, from root/train/'s folders; root/val/ must be there too."""
    if not (root / "train").is_dir() or not (root / "val").is_dir():
        raise ConfigError("data_dir", f"folder data needs {root}/train/ and {root}/val/ class folders")
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    if len(classes) < 2:
        raise ConfigError("data_dir", f"{root}/train/ needs at least 2 class folders, found {classes}")
    return classes


def check_weights_file(path: str) -> None:
    if not Path(path).exists() or not path.endswith(SUFFIXES):
        raise ConfigError(
            "pretrained", f"no weights file at {path}; give a {'/'.join(SUFFIXES)} file, or no value for the default"
        )


def check_inputs(cfg: Config, opts: Any) -> None:
    if opts.data == "folder":
        class_folders(Path(opts.data_dir))
    if opts.pretrained and opts.pretrained != LIBRARY:
        check_weights_file(opts.pretrained)
