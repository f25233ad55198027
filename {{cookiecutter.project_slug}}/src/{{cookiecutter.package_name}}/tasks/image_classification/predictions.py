"""predict.py's inputs and output: which files to label, and the CSV/JSONL rows written all at once or not at all."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ...engine.config import ConfigError
from ...engine.files import OutputBusyError, open_partial, publish
from .sources import IMAGE_SUFFIXES, list_images


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


def open_output(output: str) -> IO[str]:
    """The hidden partial file beside `output` (files.py), opened now so that an unwritable place fails before any
    work. `commit` renames it to `output` when every row is in; `files.discard` removes it."""
    final = Path(output).resolve()
    if not final.parent.is_dir():
        raise ConfigError(
            "output", f"folder {final.parent} does not exist; create it or give a path in an existing one"
        )
    try:
        return open_partial(final)
    except OutputBusyError as err:
        raise ConfigError("output", f"{err}; wait for it to finish, or give another --output") from None
    except OSError as err:
        raise ConfigError("output", f"cannot write in {final.parent} ({err.strerror}); give a writable place") from None


def commit(handle: IO[str], output: str) -> None:
    handle.close()
    publish(Path(handle.name), Path(output))


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
