"""Reading a sharded checkpoint (`sharded.py` writes them) without ever running code from it.

torch.distributed.checkpoint trusts its files: it unpickles the folder's `.metadata` and every non-tensor item with
plain pickle, so a planted folder runs whatever it names. Here `.metadata` may name only the index's own classes and
torch's dtypes, and each non-tensor item is read with weights_only, as `torch.load` reads a file; anything else is
refused with pickle.UnpicklingError before it runs.
"""

from __future__ import annotations

import io
import pathlib
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import metadata as index
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from lightning_gpu_engine.checkpoint.sharded import META

# What DCP's index pickles besides the classes of its own metadata module: where each item lies in the files, tensor
# sizes, dtypes and layouts, and the folder it was written to.
INDEX_NAMES = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): _StorageInfo,
    ("torch", "Size"): torch.Size,
    ("torch.serialization", "_get_layout"): torch.serialization._get_layout,
    ("pathlib", "PosixPath"): pathlib.PosixPath,
}


class _IndexUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in INDEX_NAMES:
            return INDEX_NAMES[module, name]
        found = getattr(index, name, None) if module == index.__name__ else None
        if isinstance(found, type):  # its dataclasses and enums: data only
            return found
        found = getattr(torch, name, None) if module == "torch" else None
        if isinstance(found, torch.dtype):
            return found
        raise pickle.UnpicklingError(f"Unsupported global: GLOBAL {module}.{name}")  # as weights_only words it


class _SafeReader(FileSystemReader):
    metadata: index.Metadata | None = None  # read once: read_sharded needs it before DCP's load asks for it

    def read_metadata(self, *args: Any, **kwargs: Any) -> index.Metadata:
        if self.metadata is None:
            with self.fs.create_stream(self._get_metadata_path(kwargs.get("rank")), "rb") as fh:
                metadata = _IndexUnpickler(fh).load()
            if not isinstance(metadata, index.Metadata):
                raise pickle.UnpicklingError(f"Unsupported global: GLOBAL {type(metadata).__qualname__}")
            self.metadata = metadata
        self.metadata.storage_meta = self.metadata.storage_meta or index.StorageMeta()
        self.metadata.storage_meta.load_id = self.load_id
        return self.metadata


class _SafePlanner(_EmptyStateDictLoadPlanner):
    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        data = value.read()
        torch.load(io.BytesIO(data), weights_only=True)
        super().load_bytes(read_item, io.BytesIO(data))


def read_sharded(path: Path, tensors: bool = True) -> dict[str, Any]:
    """The checkpoint in a sharded folder as one dict, as torch.load gives a file's: full tensors on the CPU. Without
    `tensors`, each tensor is a meta tensor of its saved shape and dtype: what the checks before a resume need,
    without every rank reading every rank's shards (gigabytes for a model that FSDP2 shards)."""
    reader = _SafeReader(path)
    metadata = reader.read_metadata()
    shapes = {k: v for k, v in metadata.state_dict_metadata.items() if isinstance(v, index.TensorStorageMetadata)}
    wanted = None if tensors else metadata.state_dict_metadata.keys() - shapes.keys()
    contents: dict[str, Any] = {}
    planner = _SafePlanner(wanted, allow_partial_load=not tensors)
    _load_state_dict(contents, storage_reader=reader, planner=planner, no_dist=True)
    if not tensors:
        for key, item in shapes.items():
            where = (metadata.planner_data or {}).get(key, (key,))
            set_element(contents, where, torch.empty(item.size, dtype=item.properties.dtype, device="meta"))
    checkpoint = torch.load(path / META, map_location="cpu", weights_only=True)
    if "state_dict" in contents:  # else refused by the checks, as a file without one is
        checkpoint["state_dict"] = contents.pop("state_dict")
    optimizers = sorted((k for k in contents if k.startswith("optimizer_")), key=lambda k: int(k.split("_")[1]))
    checkpoint["optimizer_states"] = [numbered(contents.pop(k)) for k in optimizers]
    return checkpoint


def numbered(optimizer: dict[str, Any]) -> dict[str, Any]:
    """DCP keeps dict keys as strings: a torch optimizer's state is keyed by parameter numbers, which it matches to
    the numbers in its param_groups, so "0" would load as no state at all. (FSDP2's are names: kept.)"""
    state = optimizer.get("state", {})
    return {**optimizer, "state": {int(k) if str(k).isdigit() else k: v for k, v in state.items()}}


def damage(path: Path) -> str | None:
    """What is wrong with the sharded folder `path`, in a user's words, from its index and the files' sizes alone (no
    shard is read); None when it looks whole. A part missing or cut short (a copy that did not finish, a full disk)
    is found here, before a resume, not 60 lines deep inside Lightning's restore."""
    if not (path / META).is_file():
        return f"{META} is missing (rank 0's part: the loops, callbacks and options)"
    if not zipfile.is_zipfile(path / META):
        return f"{META} is cut short or not torch.save's"
    if not (path / ".metadata").is_file():
        return "its index .metadata is missing"
    try:
        metadata = _SafeReader(path).read_metadata()
    except pickle.UnpicklingError as err:
        if "Unsupported global" in str(err):
            return None  # a planted index: refused as holding code, by the reading that follows
        return f"its index .metadata cannot be read ({err})"
    except (EOFError, OSError, ValueError, AttributeError) as err:
        return f"its index .metadata cannot be read ({type(err).__name__}: {err})"
    needed: dict[str, int] = {}
    for where in metadata.storage_data.values():
        needed[where.relative_path] = max(needed.get(where.relative_path, 0), where.offset + where.length)
    for name, size in sorted(needed.items()):
        shard = path / name
        if not shard.is_file():
            return f"its shard {name} is missing"
        if shard.stat().st_size < size:
            return f"its shard {name} has {shard.stat().st_size} bytes where its index needs {size}: cut short"
    return None
