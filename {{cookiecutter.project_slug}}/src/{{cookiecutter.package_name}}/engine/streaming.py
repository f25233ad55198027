"""--data streaming: LitData chunks in a local folder or at an s3:// URL, written by prepare_data.py and read by index.

A run reads `StreamedItems[i]` through the engine's own loaders, as it reads files: the epoch's order depends only on
(seed, epoch), the position is saved in every checkpoint, and a resumed run (one device, DDP ranks or nodes) reads
exactly the samples an uninterrupted one would. LitData's own loader state is not used: it does not survive kill -9
(nothing saves it) and Lightning does not restore it (litData#775). Reading by index, LitData fetches each sample's
bytes with one ranged GET from object storage (nothing but the index is cached on disk) and reads local chunks in
place.

Beside the splits' chunks (PREFIX/train/, PREFIX/val/) lies PREFIX/made_by.json, written last: which task made them,
and what the task needs to trust them (the classes, the tokenizer's hash, the sequence length).
"""

from __future__ import annotations

import bisect
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from .config import ConfigError
from .files import PartialFolder, write_text

MADE_BY = "made_by.json"
SPLITS = ("train", "val")
MAKE = "make them with prepare_data.py"


def _boto3_for_http_endpoints() -> None:
    """LitData 0.2.76 reaches S3 through obstore when it is installed, but builds obstore's store without allow_http:
    an http:// endpoint (MinIO on a cluster's network, a local S3 server) fails every GET. Its boto3 client, which
    reads AWS_ENDPOINT_URL itself, serves those; https endpoints keep obstore. Run at import: LitData's spawned
    writers import this module again when they unpickle a task's item function."""
    if os.environ.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        from litdata.streaming import downloader

        downloader._OBSTORE_AVAILABLE = False  # type: ignore[attr-defined]


_boto3_for_http_endpoints()


def is_remote(url: str) -> bool:
    return url.startswith("s3://")


def _s3_client() -> Any:
    import boto3
    from botocore.config import Config

    # few retries: an unreachable endpoint is told in seconds, not after minutes of back-off
    return boto3.client("s3", config=Config(retries={"max_attempts": 2}, connect_timeout=5, read_timeout=30))


def _bucket_key(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, f"{prefix.strip('/')}/{MADE_BY}".lstrip("/")


BYTE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_chunk_bytes(text: str) -> int:
    """'64MB' -> 64000000: --chunk-bytes in bytes, a unit required (LitData's own parse fails only after the data is
    read, and takes a unitless number for nothing it can use)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", text.lower())
    size = int(float(found.group(1)) * BYTE_UNITS[found.group(2)]) if found and found.group(2) in BYTE_UNITS else 0
    if size < 1:
        units = "B, KB, MB, GB, KiB, MiB, GiB"
        raise ConfigError("chunk_bytes", f"expected a size with its unit ({units}), like 64MB or 512KB; got {text!r}")
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
        bucket, key = _bucket_key(output)
        _s3_client().put_object(Bucket=bucket, Key=key, Body=record.encode())
    else:
        write_text(Path(output, MADE_BY), record)


def read_made_by(data_dir: str, task: str) -> dict[str, Any]:
    """made_by.json of the chunks at `data_dir`, checked to be `task`'s; each way to fail in one line."""
    if is_remote(data_dir):
        import botocore.exceptions as errors

        bucket, key = _bucket_key(data_dir)
        endpoint = os.environ.get("AWS_ENDPOINT_URL", "AWS's")
        try:
            text = _s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
        except (errors.EndpointConnectionError, errors.ConnectTimeoutError) as err:
            reach = f"cannot reach the S3 endpoint {endpoint} ({err})"
            raise ConfigError("data_dir", f"{reach}; check AWS_ENDPOINT_URL") from None
        except errors.NoCredentialsError:
            raise ConfigError("data_dir", f"no S3 credentials for {data_dir}: set AWS_ACCESS_KEY_ID") from None
        except errors.ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            if code == "NoSuchBucket":
                raise ConfigError("data_dir", f"there is no bucket {bucket} at {endpoint}") from None
            if code in ("NoSuchKey", "404"):
                raise ConfigError("data_dir", f"no chunks at {data_dir} (no {MADE_BY}); {MAKE}") from None
            raise ConfigError("data_dir", f"cannot read s3://{bucket}/{key}: {err}") from None
    else:
        try:
            text = Path(data_dir, MADE_BY).read_bytes()
        except OSError:
            raise ConfigError("data_dir", f"no chunks in {data_dir} (no {MADE_BY}); {MAKE}") from None
    try:
        made_by: dict[str, Any] = json.loads(text)
    except ValueError:
        raise ConfigError("data_dir", f"{data_dir}/{MADE_BY} is not JSON; {MAKE} again") from None
    if made_by.get("task") != task:
        raise ConfigError(
            "data_dir", f"the chunks at {data_dir} were made for {made_by.get('task')}, not {task}; {MAKE}"
        )
    return made_by


class DamagedChunkError(ConfigError):
    """A chunk cut short or deleted during the run. One argument: in a loader worker's traceback, PyTorch re-creates
    the error from its text alone, and the text's last line is the message."""

    def __init__(self, message: str) -> None:
        super().__init__("data_dir", message.strip().splitlines()[-1].split("--data-dir: ", 1)[-1])


class StreamedItems(Dataset[dict[str, Any]]):
    """One split of the chunks, item by item: `len` from LitData's index, `[i]` the i-th item written."""

    def __init__(self, data_dir: str, split: str, cache_dir: str | None) -> None:
        self.url = f"{data_dir.rstrip('/')}/{split}"
        # unset: $TMPDIR, which SLURM and most schedulers point at the node's own disk
        self.cache_dir = str(Path(cache_dir or Path(os.environ.get("TMPDIR", "/tmp"), "litdata"), split))
        self.dataset = self._open()
        # every item of the split, from the index: LitData's len() is this rank's share under torch.distributed
        self.length = sum(end - start for start, end in self.dataset.region_of_interest)
        self.chunks = self._chunk_sizes()
        self.ends = [end for _, _, end in self.chunks]

    def _open(self) -> Any:
        from litdata import StreamingDataset

        Path(self.cache_dir).mkdir(parents=True, exist_ok=True)
        self.pid = os.getpid()
        return StreamingDataset(self.url, cache_dir=self.cache_dir)

    def _chunk_sizes(self) -> list[tuple[str, int, int]]:
        """Local chunks: (file, bytes, last item + 1) of each, from the index LitData wrote."""
        if is_remote(self.url):
            return []
        ends, found = 0, []
        for chunk in json.loads(Path(self.url, "index.json").read_text())["chunks"]:
            ends += chunk["chunk_size"]
            found.append((chunk["filename"], chunk["chunk_bytes"], ends))
        return found

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        if os.getpid() != self.pid:  # a forked loader worker: its own reader, no connection shared with the parent
            self.dataset = self._open()
        if self.chunks:  # LitData waits for a local chunk to reach its size: for a cut one, forever
            chunk = self.chunks[bisect.bisect_right(self.ends, index)]
            path = Path(self.url, chunk[0])
            size = path.stat().st_size if path.is_file() else None
            if size != chunk[1]:
                said = "is missing" if size is None else f"has {size} bytes, not the {chunk[1]} written"
                raise DamagedChunkError(f"{path} {said}: the chunks changed during the run; {MAKE} again")
        try:
            return dict(self.dataset[index])
        except Exception as err:  # a deleted or cut object: a 404, a short range, bytes that do not decode
            raise DamagedChunkError(
                f"cannot read item {index} of {self.url} ({type(err).__name__}): the chunks changed during the "
                f"run; {MAKE} again"
            ) from None

    def __getstate__(self) -> dict[str, Any]:  # a worker started from a forkserver opens its own reader too
        return {**self.__dict__, "dataset": None, "pid": None}
