"""The compile cache's artifacts file (compile_cache.py says why): read, checked against this torch and device, and
loaded into inductor's caches at start; written again by `SaveCompileCache` after the first training step."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from torch._dynamo.utils import counters

from lightning_gpu_engine.perf.compile_cache import STARTED
from lightning_gpu_engine.tools.files import OutputBusyError, commit, discard, open_partial

ARTIFACTS = "artifacts.bin"  # in the cache folder: a JSON line (torch, device, sha256 of the rest), then torch's bytes


def use(directory: Path, device: str) -> SaveCompileCache:
    """Inductor's and Triton's caches in `directory`, and its artifacts loaded; the callback that saves them again."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    aside = set_aside_if_damaged(directory)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
    os.environ["TRITON_CACHE_DIR"] = str(directory / "triton")  # Triton writes each kernel by rename: ranks can share
    found = load(directory / ARTIFACTS, device)
    return SaveCompileCache(directory, device, found=f"{aside}\n{found}" if aside else found)


def set_aside_if_damaged(directory: Path) -> str | None:
    """Inductor names each compiled graph's Python module by the hash of its text, and takes a file of that name as
    written: one cut short (a full disk, a copy that did not finish) failed every later run in its import
    ("SyntaxError: unterminated triple-quoted string literal"). A folder holding one is renamed aside, kept for a
    look, and the run starts an empty one: the note that says so, or None for a whole folder."""
    from torch._inductor.codecache import get_hash

    for source in sorted(directory.glob("*/*.py")):
        try:
            whole = get_hash(source.read_text().strip(), "", "code") == source.stem
        except (OSError, UnicodeDecodeError):
            whole = False
        if whole:
            continue
        aside = directory.with_name(f"{directory.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        with contextlib.suppress(OSError):  # another rank sharing the folder set it aside a moment ago
            directory.rename(aside)
        directory.mkdir(parents=True, exist_ok=True)
        return (
            f"note: compile cache: {source.relative_to(directory)} in {directory} is not what its name says (cut "
            f"short, or another torch's): the folder is set aside as {aside}; compiling anew"
        )
    return None


def stamp(device: str) -> dict[str, str]:
    return {"torch": torch.__version__, "device": device}


def load(path: Path, device: str) -> str:
    if not path.is_file():
        return f"compile cache: {path.parent} (no {ARTIFACTS} yet: this run saves one after its first step)"
    try:
        header, payload = read(path)
    except (OSError, ValueError) as err:
        return f"note: compile cache: {path} is unreadable ({err}); compiling without it, and replacing it"
    made, here = (f"torch {s['torch']} on {s['device']}" for s in (header, stamp(device)))
    if made != here:
        return f"note: compile cache: {path} was made by {made}, not {here}: ignored, and replaced by this run's"
    quiet = logging.getLogger("torch.compiler._cache")  # its failure would be a logged traceback: ours is one line
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        info = torch.compiler.load_cache_artifacts(payload)
    except Exception as err:  # torch's unpickling of a file it promises nothing about: any error means unusable
        info, reason = None, f"{type(err).__name__}: {err}"
    else:
        reason = "torch could not read it back"
    finally:
        quiet.setLevel(level)
    if info is None:
        return f"note: compile cache: {path} is unreadable ({reason}); compiling without it, and replacing it"
    return f"compile cache: loaded {len(info.inductor_artifacts)} compiled graphs from {path} ({made})"


def read(path: Path) -> tuple[dict[str, Any], bytes]:
    head, _, payload = path.read_bytes().partition(b"\n")
    try:
        header = json.loads(head)
    except ValueError:  # not JSON, not UTF-8
        header = None
    if not isinstance(header, dict) or not {"torch", "device", "sha256"} <= header.keys():
        raise ValueError("no header line naming its torch and device")
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise ValueError("its contents do not match their checksum: cut short or changed")
    return header, payload


def held(path: Path, device: str) -> int:
    """The compiled graphs in a usable artifacts file at `path`: 0 where it is absent, unreadable or another's."""
    try:
        header, _ = read(path)
    except (OSError, ValueError):
        return 0
    graphs = header.get("graphs")
    if not isinstance(graphs, int) or {k: header[k] for k in ("torch", "device")} != stamp(device):
        return 0
    return graphs


def write(path: Path, payload: bytes, device: str, graphs: int) -> None:
    """`path` whole or not at all; a run saving the same shared folder at this moment has it, and this one leaves it."""
    header = {**stamp(device), "graphs": graphs, "sha256": hashlib.sha256(payload).hexdigest()}
    try:
        handle = open_partial(path)
    except OutputBusyError:
        return
    try:
        with open(handle.name, "wb") as out:  # the partial file, in bytes, while `handle` holds its lock
            out.write(json.dumps(header).encode() + b"\n" + payload)
    except OSError:
        discard(handle)
        raise
    commit(handle, path)  # fsyncs the file (one inode, whichever descriptor) and publishes it under the lock


class SaveCompileCache(Callback):
    """Saves the artifacts once, after the first training step: by then the graphs of the training step and of
    validation's full batches (Lightning's sanity check runs first) are compiled. Once, because torch reads back only
    the last of several saves made by one process (torch 2.14: `load_cache_artifacts` keeps one batch per kind of
    artifact); what is compiled later is still in the cache folder. A file holding as many graphs is kept: a resumed
    run skips the sanity check, and its fewer graphs would replace the first run's. Says how long the first step took
    and what the cache gave."""

    def __init__(self, directory: Path, device: str, found: str) -> None:
        self.path = directory / ARTIFACTS
        self.device = device
        self.found = found  # the line that says what the run found there
        self.stepped = False

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if self.stepped or not trainer.is_global_zero:
            return
        self.stepped = True
        made = torch.compiler.save_cache_artifacts()
        graphs = len(made[1].inductor_artifacts) if made is not None else 0
        try:
            if made is not None and graphs > held(self.path, self.device):
                write(self.path, made[0], self.device, graphs)
        except OSError as err:  # a full disk: the checkpoints will say so; the run does not depend on this file
            print(f"note: compile cache: could not save {self.path} ({err.strerror}); the run goes on", flush=True)
        hits, misses = (counters["inductor"][f"fxgraph_cache_{what}"] for what in ("hit", "miss"))
        print(
            f"compile cache: first training step done {time.monotonic() - STARTED:.1f} s after start; "
            f"{hits} compiled graphs from the cache, {misses} compiled anew",
            flush=True,
        )
