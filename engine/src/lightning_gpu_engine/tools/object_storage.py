"""Reads from and writes to object storage (s3://, and any S3-compatible server AWS_ENDPOINT_URL names) with a time
limit, said aloud while they wait, and told apart from damaged data when they fail.

Every request, the engine's and LitData's (streaming.py hands it `storage_options()`), gets at most TRIES attempts: a
connection is given CONNECT_S seconds, a read that stops receiving READ_S, and botocore's standard retry mode waits a
random 0-1, 0-2, 0-4 and 0-8 s between attempts. So an endpoint that refuses connections (a stopped server) is told
within seconds, one that does not answer them (a host gone) within TRIES x CONNECT_S + 15 = 65 s, and a server that
accepts and then says nothing within TRIES x READ_S + 15 = 115 s (BOUND_S). That rides out what a flaky network does:
a dropped connection, a reset or a 503 "slow down" is tried four more times across up to 15 s, and 20 s of silence in
one ranged read of one sample is an outage, not a slow link. LitData's own client makes 1000 adaptive attempts with
60 s timeouts: an outage was a silent hang of hours, for its uploads as for its reads, so writes (`upload`, `put`,
`delete_under`) are made here, one request at a time in the calling thread, each within the same bound.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TRIES, CONNECT_S, READ_S = 5, 10, 20
BOUND_S = TRIES * READ_S + 15  # the longest a request can take: every attempt silent, every backoff its longest
NOTE_AFTER_S = 10  # a read this long without an answer is said, once


def endpoint() -> str:
    return os.environ.get("AWS_ENDPOINT_URL", "AWS's")


def client_config() -> Any:
    from botocore.config import Config

    retries = {"total_max_attempts": TRIES, "mode": "standard"}
    return Config(retries=retries, connect_timeout=CONNECT_S, read_timeout=READ_S)


def storage_options() -> dict[str, Any]:
    """LitData's StreamingDataset(storage_options=...): its S3 client built with `client_config`."""
    return {"config": client_config()}


def s3_client() -> Any:
    import boto3

    return boto3.client("s3", config=client_config())


def split_url(url: str) -> tuple[str, str]:
    """s3://bucket/a/b -> ("bucket", "a/b")."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key


def upload(local: Path, url: str) -> None:
    """The file `local` as the object `url`: one part at a time in this thread (threads of boto3's own would go on
    past a failure), each part a request within BOUND_S, its bytes moving keeping the watch quiet."""
    from boto3.s3.transfer import TransferConfig

    bucket, key = split_url(url)
    with watched(f"writing {url}"):
        s3_client().upload_file(
            str(local), bucket, key, Config=TransferConfig(use_threads=False), Callback=lambda _: heard()
        )


def put(url: str, data: bytes) -> None:
    bucket, key = split_url(url)
    with watched(f"writing {url}"):
        s3_client().put_object(Bucket=bucket, Key=key, Body=data)


def delete_under(url: str) -> None:
    """Every object whose key starts with `url`'s, a page of 1000 at a time."""
    bucket, prefix = split_url(url)
    client = s3_client()
    with watched(f"deleting {url}*"):
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            objects = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if objects:
                client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
            heard()


def unreachable(err: BaseException) -> bool:
    """A failure of the endpoint, not of the data: no connection, a timeout, a connection cut, a server error."""
    import botocore.exceptions as errors

    while err is not None:
        if isinstance(err, errors.ConnectionError | errors.HTTPClientError):
            return True
        status = (
            err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if isinstance(err, errors.ClientError)
            else 0
        )
        if status >= 500:
            return True
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return False


class _Watch:
    """This process's request in progress, and the thread that says so when it waits long (one of each per process: a
    forked loader worker has the data, not the thread)."""

    pid = -1
    since: float | None = None
    what = ""
    said = False


@contextmanager
def watched(what: str) -> Iterator[None]:
    """A request to object storage, `what` it does ("reading item 3 of s3://..."): one that waits NOTE_AFTER_S is
    said in a note (a stalled run was silent)."""
    if _Watch.pid != os.getpid():
        _Watch.pid = os.getpid()
        threading.Thread(target=_watch, name="object-storage-watch", daemon=True).start()
    _Watch.since, _Watch.what, _Watch.said = time.monotonic(), what, False
    try:
        yield
    finally:
        _Watch.since = None


def heard() -> None:
    """The watched request moved bytes: its silence starts again."""
    if _Watch.since is not None:
        _Watch.since = time.monotonic()


def _watch() -> None:
    while True:
        time.sleep(1)
        since = _Watch.since
        if since is not None and not _Watch.said and time.monotonic() - since >= NOTE_AFTER_S:
            _Watch.said = True
            print(
                f"note: streaming: no answer from {endpoint()} for {NOTE_AFTER_S} s, {_Watch.what}; it is "
                f"tried again for up to {BOUND_S} s in all before the run stops",
                flush=True,
            )
