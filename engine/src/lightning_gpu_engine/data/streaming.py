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
import errno
import json
import os
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.tools.object_storage import (
    BOUND_S,
    TRIES,
    endpoint,
    s3_client,
    storage_options,
    unreachable,
    watched,
)
from lightning_gpu_engine.tools.rundir import check_writable_dir

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


def bucket_key(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, f"{prefix.strip('/')}/{MADE_BY}".lstrip("/")


def cache_root(cache_dir: str | None) -> Path:
    """--cache-dir, or where LitData's index goes when it is unset: $TMPDIR/litdata, which SLURM and most schedulers
    point at the node's own disk."""
    return Path(cache_dir) if cache_dir else Path(os.environ.get("TMPDIR", "/tmp"), "litdata")


def check_cache_dir(cache_dir: str | None) -> None:
    """The index cache can be made and written in (rundir.check_writable_dir): ConfigError for --cache-dir, its
    default's too, where a NotADirectoryError or OSError from inside the run's setup was."""
    try:
        check_writable_dir(cache_root(cache_dir), "cache_dir")
    except ConfigError as err:
        if cache_dir:
            raise
        said = str(err).split(": ", 1)[1].removesuffix("; choose a writable one")
        raise ConfigError(
            "cache_dir", f"unset, so $TMPDIR/litdata: {said}; give --cache-dir a writable folder"
        ) from None


def read_made_by(data_dir: str, task: str, cache_dir: str | None = None) -> dict[str, Any]:
    """made_by.json of the chunks at `data_dir`, checked to be `task`'s; each way to fail in one line. The run's
    --cache-dir is checked first."""
    check_cache_dir(cache_dir)
    if is_remote(data_dir):
        import botocore.exceptions as errors

        bucket, key = bucket_key(data_dir)
        try:
            text = s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
        except errors.NoCredentialsError:
            raise ConfigError("data_dir", f"no S3 credentials for {data_dir}: set AWS_ACCESS_KEY_ID") from None
        except Exception as err:
            if unreachable(err):
                raise ConfigError(
                    "data_dir", f"cannot reach the S3 endpoint {endpoint()} ({err}); check AWS_ENDPOINT_URL"
                ) from None
            code = err.response.get("Error", {}).get("Code", "") if isinstance(err, errors.ClientError) else None
            if code == "NoSuchBucket":
                raise ConfigError("data_dir", f"there is no bucket {bucket} at {endpoint()}") from None
            if code in ("NoSuchKey", "404"):
                raise ConfigError("data_dir", f"no chunks at {data_dir} (no {MADE_BY}); {MAKE}") from None
            if code is not None:
                raise ConfigError("data_dir", f"cannot read s3://{bucket}/{key}: {err}") from None
            raise
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


def _unreachable(what: str, err: BaseException) -> DamagedChunkError:
    return DamagedChunkError(
        f"cannot reach the S3 endpoint {endpoint()} for {what} ({type(err).__name__}, {TRIES} tries over at most "
        f"{BOUND_S} s); the chunks are unchanged: --resume last continues once it answers"
    )


class StreamedItems(Dataset[dict[str, Any]]):
    """One split of the chunks, item by item: `len` from LitData's index, `[i]` the i-th item written."""

    def __init__(self, data_dir: str, split: str, cache_dir: str | None) -> None:
        self.url = f"{data_dir.rstrip('/')}/{split}"
        self.cache_dir = str(cache_root(cache_dir) / split)
        self.dataset = self._open()
        # every item of the split, from the index: LitData's len() is this rank's share under torch.distributed
        self.length = sum(end - start for start, end in self.dataset.region_of_interest)
        self.chunks = self._chunk_sizes()
        self.ends = [end for _, _, end in self.chunks]

    def _open(self) -> Any:
        from litdata import StreamingDataset

        self.pid = os.getpid()
        options = storage_options() if is_remote(self.url) else None  # every request with a time limit
        try:
            Path(self.cache_dir).mkdir(parents=True, exist_ok=True)
            return StreamingDataset(self.url, cache_dir=self.cache_dir, storage_options=options)
        except OSError as err:  # the index cannot be kept: a --cache-dir (checked at start) full, or made read-only
            if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
                raise
            raise ConfigError(
                "cache_dir",
                f"cannot keep LitData's index in {self.cache_dir} ({err.strerror}); give a writable one with room",
            ) from None
        except Exception as err:  # the index is read again as each stage starts (the final test's too)
            if options is not None and unreachable(err):
                raise _unreachable(f"the index of {self.url}", err) from None
            raise

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
            if not is_remote(self.url):
                return dict(self.dataset[index])
            with watched(f"reading item {index} of {self.url}"):
                return dict(self.dataset[index])
        except Exception as err:
            if is_remote(self.url) and unreachable(err):  # the server, not the chunks: they are as they were
                raise _unreachable(f"item {index} of {self.url}", err) from None
            raise DamagedChunkError(  # a deleted or cut object: a 404, a short range, bytes that do not decode
                f"cannot read item {index} of {self.url} ({type(err).__name__}): the chunks changed during the "
                f"run; {MAKE} again"
            ) from None

    def __getstate__(self) -> dict[str, Any]:  # a worker started from a forkserver opens its own reader too
        return {**self.__dict__, "dataset": None, "pid": None}
