"""The store of an --output-dir URL of any other scheme (store.py), through its fsspec filesystem where its package is
installed (`gs://` with gcsfs): no conditional writes, so the location is unguarded (lease.py says so)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from lightning_gpu_engine.checkpoint.store import Entry, Store, Unsupported


class FsspecStore(Store):
    """Any other scheme, through its fsspec filesystem: no conditional writes, so the location is unguarded."""

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(url, timeout)
        from fsspec.core import url_to_fs

        self.fs, self.root = url_to_fs(self.url)  # the root as the filesystem names paths

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def listing(self, rel: str = "") -> dict[str, Entry]:
        def run(progress: Callable[..., None]) -> dict[str, Entry]:
            base = self.path(rel).rsplit("/", 1)[0]
            found = self.fs.find(base, detail=True) if self.fs.exists(base) else {}
            entries = {}
            for name, info in found.items():
                relative = name[len(self.root) + 1 :]
                if relative.startswith(rel):
                    modified = info.get("mtime") or info.get("created") or info.get("LastModified") or 0.0
                    stamp = modified.timestamp() if hasattr(modified, "timestamp") else float(modified)
                    entries[relative] = Entry(int(info.get("size") or 0), stamp)
            return entries

        return self.bounded(f"list {self.where(rel)}", run)

    def upload(self, local: Path, rel: str) -> None:
        self.bounded(f"upload {self.where(rel)}", lambda progress: self.fs.put_file(str(local), self.path(rel)))

    def download(self, rel: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f".{local.name}.download")
        try:
            self.bounded(f"download {self.where(rel)}", lambda progress: self.fs.get_file(self.path(rel), str(partial)))
            os.replace(partial, local)
        finally:
            partial.unlink(missing_ok=True)

    def read(self, rel: str) -> tuple[bytes, str, float] | None:
        def run(progress: Callable[..., None]) -> tuple[bytes, str, float] | None:
            return (self.fs.cat_file(self.path(rel)), "", 0.0) if self.fs.exists(self.path(rel)) else None

        return self.bounded(f"read {self.where(rel)}", run)

    def write(self, rel: str, data: bytes, absent: bool = False, replacing: str | None = None) -> str:
        if absent or replacing:
            raise Unsupported(f"{self.scheme}:// has no conditional writes")
        self.bounded(f"write {self.where(rel)}", lambda progress: self.fs.pipe_file(self.path(rel), data))
        return ""

    def copy(self, src: str, dst: str) -> None:
        self.bounded(f"copy {self.where(src)} to {dst}", lambda progress: self.fs.copy(self.path(src), self.path(dst)))

    def delete(self, rels: list[str], replacing: str | None = None) -> None:
        for rel in rels:
            path = self.path(rel)
            self.bounded(f"delete {self.where(rel)}", lambda progress: self.fs.rm_file(path))  # noqa: B023
