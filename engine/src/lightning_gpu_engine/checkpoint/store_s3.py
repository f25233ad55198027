"""The store of an `s3://bucket/prefix` --output-dir (store.py): boto3, with AWS_ENDPOINT_URL naming any S3-compatible
server, each request bounded by --store-timeout and boto3's own retries inside it."""

from __future__ import annotations

import os
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from lightning_gpu_engine.checkpoint.store import Conflict, Entry, Store, StoreError, Unsupported
from lightning_gpu_engine.tools.object_storage import CONNECT_S, unreachable

TRIES = 3  # boto3's attempts at one request, inside the bound: a dropped connection or a 503 is tried again
# botocore's failures to reach an endpoint, in a few words: its own messages hold the whole request URL
CUT = {
    "EndpointConnectionError": "could not connect",
    "ConnectTimeoutError": "the connection timed out",
    "ReadTimeoutError": "it stopped answering",
    "ConnectionClosedError": "the connection was cut",
}


class S3Store(Store):
    guarded = True  # If-None-Match and If-Match on PUT (AWS since 2024, MinIO, moto); Unsupported where not

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(url, timeout)
        import boto3
        from botocore.config import Config

        retries = {"total_max_attempts": TRIES, "mode": "standard"}
        config = Config(retries=retries, connect_timeout=min(CONNECT_S, timeout), read_timeout=timeout)
        self.client = boto3.client("s3", config=config)

    def endpoint(self) -> str:
        return str(self.client.meta.endpoint_url)

    def failed(self, what: str, err: BaseException) -> StoreError:
        import botocore.exceptions as errors

        where = self.endpoint()
        if isinstance(err, errors.NoCredentialsError):
            return StoreError(
                f"cannot {what}: no credentials for {where}; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "(or AWS_PROFILE)"
            )
        response = err.response if isinstance(err, errors.ClientError) else {}
        code = response.get("Error", {}).get("Code", "")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code == "PreconditionFailed" or status == 412:
            return Conflict(f"cannot {what}: another run changed it meanwhile")
        if code == "NotImplemented" or status == 501:
            return Unsupported(f"{where} has no conditional writes ({code or status})")
        if code == "NoSuchBucket":
            return StoreError(
                f"cannot {what}: the bucket {self.bucket} does not exist at {where}; create it, or give another "
                "--output-dir"
            )
        if status in (401, 403) or code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
            return StoreError(
                f"cannot {what}: {where} refused the credentials ({code or status}); check AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), and that they may read and write the bucket"
            )
        if unreachable(err):
            said = CUT.get(type(err).__name__) or (str(err).splitlines() or [""])[0][:100]
            return StoreError(f"cannot {what}: no answer from {where} ({said}); check that it is up and reachable")
        return StoreError(f"cannot {what}: {code or type(err).__name__}: {err}")

    def listing(self, rel: str = "") -> dict[str, Entry]:
        def run(progress: Callable[..., None]) -> dict[str, Entry]:
            found: dict[str, Entry] = {}
            start = len(self.key(""))
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.key(rel)):
                progress()
                for item in page.get("Contents", []):
                    found[item["Key"][start:]] = Entry(item["Size"], item["LastModified"].timestamp())
            return found

        return self.bounded(f"list {self.where(rel)}", run)

    def upload(self, local: Path, rel: str) -> None:
        # one PUT, or a multipart upload that the store makes visible only once it is completed
        self.bounded(
            f"upload {self.where(rel)}",
            lambda progress: self.client.upload_file(str(local), self.bucket, self.key(rel), Callback=progress),
        )

    def download(self, rel: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f".{local.name}.download")
        try:
            self.bounded(
                f"download {self.where(rel)}",
                lambda progress: self.client.download_file(self.bucket, self.key(rel), str(partial), Callback=progress),
            )
            os.replace(partial, local)
        finally:
            partial.unlink(missing_ok=True)

    def read(self, rel: str) -> tuple[bytes, str, float] | None:
        import botocore.exceptions as errors

        def run(progress: Callable[..., None]) -> tuple[bytes, str, float] | None:
            try:
                got = self.client.get_object(Bucket=self.bucket, Key=self.key(rel))
            except errors.ClientError as err:
                if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return None
                raise
            now = parsedate_to_datetime(got["ResponseMetadata"]["HTTPHeaders"]["date"]).timestamp()
            return got["Body"].read(), got["ETag"], now - got["LastModified"].timestamp()

        return self.bounded(f"read {self.where(rel)}", run)

    def write(self, rel: str, data: bytes, absent: bool = False, replacing: str | None = None) -> str:
        condition = {"IfNoneMatch": "*"} if absent else {"IfMatch": replacing} if replacing else {}
        put = lambda progress: self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data, **condition)  # noqa: E731
        return str(self.bounded(f"write {self.where(rel)}", put)["ETag"])

    def copy(self, src: str, dst: str) -> None:
        source = {"Bucket": self.bucket, "Key": self.key(src)}
        self.bounded(
            f"copy {self.where(src)} to {dst}",
            lambda progress: self.client.copy(source, self.bucket, self.key(dst), Callback=progress),
        )

    def delete(self, rels: list[str], replacing: str | None = None) -> None:
        if replacing is not None:
            [rel] = rels
            self.bounded(
                f"delete {self.where(rel)}",
                lambda progress: self.client.delete_object(Bucket=self.bucket, Key=self.key(rel), IfMatch=replacing),
            )
            return
        for start in range(0, len(rels), 1000):  # the most one request may name
            objects = [{"Key": self.key(rel)} for rel in rels[start : start + 1000]]

            def delete(progress: Callable[..., None], objects: list[dict[str, str]] = objects) -> Any:
                return self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})

            self.bounded(f"delete {len(objects)} objects under {self.url}", delete)
