"""prepare_data.py's side of --data streaming (streaming.py reads): --chunk-bytes, and each split's items written as
LitData chunks into a local folder, whole or not at all, or to an s3:// URL; made_by.json last, since it vouches for
them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightning_gpu_engine.checkpoint.files import PartialFolder, write_text
from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.data.object_storage import s3_client
from lightning_gpu_engine.data.streaming import MADE_BY, bucket_key, is_remote

BYTE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_chunk_bytes(text: str) -> int:
    """'64MB' -> 64000000: --chunk-bytes in bytes, a unit required (LitData's own parse fails only after the data is
    read, and takes a unitless number for nothing it can use), and at least a byte."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", text.lower())
    if not found or found.group(2) not in BYTE_UNITS:
        units = "B, KB, MB, GB, KiB, MiB, GiB"
        raise ConfigError("chunk_bytes", f"expected a size with its unit ({units}), like 64MB or 512KB; got {text!r}")
    size = int(float(found.group(1)) * BYTE_UNITS[found.group(2)])
    if size < 1:
        raise ConfigError("chunk_bytes", f"expected a size of at least 1 byte, like 64MB or 512KB; got {text!r}")
    return size


@contextmanager
def chunks_output(output: str) -> Iterator[str]:
    """Where `write_chunks` writes the chunks of --output: an s3:// URL as it is; a local folder through a partial
    folder beside it (files.PartialFolder), checked before any data is read and put in place whole once made_by.json
    is in, so a failure or a kill leaves the previous chunks, or nothing."""
    if is_remote(output):
        yield output
        return
    final = Path(output)
    if final.is_dir() and any(final.iterdir()) and not (final / MADE_BY).is_file():
        raise ConfigError(
            "output", f"{final} holds files that are not chunks (no {MADE_BY}); give a new or an empty folder"
        )
    with PartialFolder(final, "output", replace=True) as out:
        yield str(out.path)
        out.publish()


def write_chunks(
    fn: Callable[[Any], dict[str, Any]],
    splits: Mapping[str, Sequence[Any]],
    output: str,
    made_by: dict[str, Any],
    num_workers: int,
    chunk_bytes: int,
) -> None:
    """Each split's items through `fn` into OUTPUT/<split>/ with `litdata.optimize`, then OUTPUT/made_by.json.
    OUTPUT: what `chunks_output` gave."""
    import litdata

    for split, items in splits.items():
        litdata.optimize(
            fn=fn,
            inputs=list(items),
            output_dir=f"{output.rstrip('/')}/{split}",
            chunk_bytes=chunk_bytes,
            num_workers=num_workers,
            mode="overwrite",  # prepare_data.py run again replaces what an earlier run wrote
            keep_data_ordered=True,  # item i is the same whatever the worker count: indices are what runs save
            verbose=False,
        )
    record = json.dumps({**made_by, "items": {s: len(items) for s, items in splits.items()}}, indent=1)
    if is_remote(output):
        bucket, key = bucket_key(output)
        s3_client().put_object(Bucket=bucket, Key=key, Body=record.encode())
    else:
        write_text(Path(output, MADE_BY), record)
