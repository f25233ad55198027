"""prepare_data.py's side of --data streaming (streaming.py reads): --chunk-bytes, and each split's items written as
LitData chunks into a local folder, whole or not at all, or to an s3:// URL; made_by.json last, since it vouches for
them.

To s3://, made_by.json is deleted before any data is read, and each split is written by LitData into a staging folder
in $TMPDIR, then uploaded here (object_storage.upload) rather than by LitData: its uploads run in threads and
processes of its own, 1000 attempts each, and a server that died or stalled after the first chunk kept prepare_data.py
silent until it was killed. Here every request ends within BOUND_S, and a failure is one line for --output that names
the object, with nothing there vouched for. Torch and LitData load only once a chunk is written: --chunk-bytes is read
before them."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.tools import object_storage as storage
from lightning_gpu_engine.tools.files import PartialFolder, write_text
from lightning_gpu_engine.tools.watcher import remove_when_abandoned

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
    """Where `write_chunks` writes the chunks of --output: an s3:// URL as it is, once its made_by.json is deleted (an
    endpoint, a bucket or credentials that will not do answer here, before any data is read); a local folder through
    a partial folder beside it (files.PartialFolder), checked before any data is read and put in place whole once
    made_by.json is in, so a failure or a kill leaves the previous chunks, or nothing."""
    from lightning_gpu_engine.data.streaming import MADE_BY, is_remote

    if is_remote(output):
        made_by = f"{output.rstrip('/')}/{MADE_BY}"
        with writing(output, made_by):
            storage.delete_under(made_by)
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
    from lightning_gpu_engine.data.streaming import MADE_BY, is_remote

    record = json.dumps({**made_by, "items": {s: len(items) for s, items in splits.items()}}, indent=1)
    base = output.rstrip("/")
    if not is_remote(output):
        for split, items in splits.items():
            _optimize(fn, items, f"{base}/{split}", num_workers, chunk_bytes)
        write_text(Path(output, MADE_BY), record)
        return
    for split, items in splits.items():
        with writing(output, f"{base}/{split}/"):  # an earlier run's chunks, more of them perhaps
            storage.delete_under(f"{base}/{split}/")
        with staging() as folder:
            _optimize(fn, items, str(folder), num_workers, chunk_bytes)
            for file in sorted(p for p in folder.rglob("*") if p.is_file()):
                url = f"{base}/{split}/{file.relative_to(folder).as_posix()}"
                with writing(output, url):
                    storage.upload(file, url)
    with writing(output, f"{base}/{MADE_BY}"):
        storage.put(f"{base}/{MADE_BY}", record.encode())


def _optimize(fn: Callable[[Any], dict[str, Any]], items: Sequence[Any], folder: str, workers: int, size: int) -> None:
    import litdata

    litdata.optimize(
        fn=fn,
        inputs=list(items),
        output_dir=folder,
        chunk_bytes=size,
        num_workers=workers,
        mode="overwrite",  # prepare_data.py run again replaces what an earlier run wrote
        keep_data_ordered=True,  # item i is the same whatever the worker count: indices are what runs save
        verbose=False,
    )


@contextmanager
def staging() -> Iterator[Path]:
    """A folder in $TMPDIR for a split's chunks on their way to object storage: removed after, or by a watcher once
    this process is gone, killed or not."""
    folder = Path(tempfile.gettempdir(), f"prepare-data-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    unwatch = remove_when_abandoned(folder)  # before the folder is made: a kill in between leaves nothing
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        unwatch()


@contextmanager
def writing(output: str, url: str) -> Iterator[None]:
    """Requests that write `url` for --output `output`, each way they fail one line for --output."""
    import botocore.exceptions as errors

    from lightning_gpu_engine.data.streaming import MADE_BY

    try:
        yield
    except errors.NoCredentialsError:
        raise ConfigError("output", f"no S3 credentials for {url}: set AWS_ACCESS_KEY_ID") from None
    except Exception as err:
        if storage.unreachable(err):
            raise ConfigError(
                "output",
                f"cannot reach the S3 endpoint {storage.endpoint()} to write {url} ({type(err).__name__}, "
                f"{storage.TRIES} tries over at most {storage.BOUND_S} s); {output} holds no {MADE_BY}, so nothing "
                "there is used: run prepare_data.py again once it answers",
            ) from None
        refused = _client_error(err)
        if refused is None:
            raise
        if refused.response.get("Error", {}).get("Code") == "NoSuchBucket":
            bucket = storage.split_url(output)[0]
            raise ConfigError("output", f"there is no bucket {bucket} at {storage.endpoint()}; create it") from None
        raise ConfigError("output", f"cannot write {url}: {str(refused).splitlines()[0]}") from None


def _client_error(err: BaseException | None) -> Any:
    """The S3 error response in `err`'s chain (boto3's upload_file hides it behind S3UploadFailedError), or None."""
    import botocore.exceptions as errors

    while err is not None and not isinstance(err, errors.ClientError):
        err = err.__cause__ or err.__context__
    return err
