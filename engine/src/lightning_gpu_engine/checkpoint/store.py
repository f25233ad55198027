"""Object storage for an --output-dir URL: `s3://bucket/prefix` through boto3 (any S3-compatible server that
AWS_ENDPOINT_URL names), any other scheme through fsspec where its filesystem package is installed (`gs://` with
gcsfs). Every request is bounded, and every failure is said as what happened and what to do.

Bounded: each request runs in a thread of its own and is given up once it has moved no bytes (an upload, a download)
or not answered (anything else) for `timeout` seconds (--store-timeout), boto3's own retries included. A store that is
down, stalled or refusing costs at most that long, never a hang: a stop's save (SIGTERM) must end within a
scheduler's grace period, and the engine's streaming client waits up to BOUND_S (object_storage.py), longer than most.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
MANIFEST_MAX = 1 << 20  # bytes: a sharded checkpoint's manifest is far smaller, a checkpoint file far larger


class StoreError(Exception):
    """A request the store did not answer, or refused; the message says what failed and what to do."""


class Conflict(StoreError):
    """A conditional write found the object other than it expected: another run wrote it."""


class Unsupported(StoreError):
    """The store has no conditional writes (an older S3-compatible server, or a filesystem that is not S3)."""


@dataclass(frozen=True)
class Entry:
    size: int
    modified: float  # seconds since the epoch, by the store's clock


def is_url(text: str | None) -> bool:
    scheme, sep, _ = (text or "").partition("://")
    return bool(sep) and scheme.isidentifier() and len(scheme) > 1  # not a Windows drive letter


class Store:
    """The objects under one URL, named by paths relative to it ("checkpoints/last.ckpt")."""

    guarded = False  # whether the store has conditional writes, which the run's lease needs (lease.py)

    def __init__(self, url: str, timeout: float) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout
        self.scheme, _, rest = self.url.partition("://")
        self.bucket, _, prefix = rest.partition("/")
        self.prefix = prefix.strip("/")

    def where(self, rel: str = "") -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def bounded(self, what: str, call: Callable[[Callable[..., None]], T]) -> T:
        """`call(progress)` in a thread, given up after `timeout` s without progress; StoreError says why."""
        moved = [time.monotonic()]
        box: dict[str, Any] = {}

        def progress(*_: Any) -> None:
            moved[0] = time.monotonic()

        def run() -> None:
            try:
                box["value"] = call(progress)
            except BaseException as err:  # handed to the waiting thread
                box["error"] = err

        thread = threading.Thread(target=run, name="store-request", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.05)
            if thread.is_alive() and time.monotonic() - moved[0] >= self.timeout:
                raise StoreError(
                    f"cannot {what}: no answer from {self.endpoint()} for {self.timeout:g} s (--store-timeout)"
                )
        if "error" in box:
            if isinstance(box["error"], StoreError):
                raise box["error"]
            raise self.failed(what, box["error"]) from None
        return box["value"]  # type: ignore[no-any-return]

    def failed(self, what: str, err: BaseException) -> StoreError:
        return StoreError(f"cannot {what}: {type(err).__name__}: {err}")

    def endpoint(self) -> str:
        return f"the {self.scheme}:// store"

    # what each kind of store provides
    def listing(self, rel: str = "") -> dict[str, Entry]:
        """Every object whose path starts with `rel`, by its path relative to the URL."""
        raise NotImplementedError

    def upload(self, local: Path, rel: str) -> None:
        """`local` as the object `rel`, which appears whole or not at all."""
        raise NotImplementedError

    def download(self, rel: str, local: Path) -> None:
        raise NotImplementedError

    def read(self, rel: str) -> tuple[bytes, str, float] | None:
        """The object's bytes, its version tag and its age in seconds (by the store's clock); None if it is absent."""
        raise NotImplementedError

    def write(self, rel: str, data: bytes, absent: bool = False, replacing: str | None = None) -> str:
        """`data` as the object `rel`; its version tag. `absent`: only if there is none (else Conflict);
        `replacing`: only if it is still that version (else Conflict)."""
        raise NotImplementedError

    def copy(self, src: str, dst: str) -> None:
        raise NotImplementedError

    def delete(self, rels: list[str], replacing: str | None = None) -> None:
        raise NotImplementedError
