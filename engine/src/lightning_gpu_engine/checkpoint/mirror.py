"""An object-storage --output-dir, mirrored from the run's staging folder on this node (staging.py makes it).

The run writes as it would to a local --output-dir, in the staging folder; every checkpoint, once published there
whole, is uploaded (`AtomicCheckpointIO`, saving.py), and the rest (config.yaml, the logs, validation.jsonl) at each
save and at the end. A checkpoint file is one object, which the store shows whole or not at all (one PUT, or a
multipart upload completed at once). A sharded checkpoint's parts are uploaded first, each rank its own, under
`.<name>.shards-<letters>/`, and then one small object under its name (`manifest`) names them: a name never points at
a part that is not there. An earlier folder of the name is deleted only after that.

The first failure of the store is kept: every later request is skipped (a save fails at once with the same words) and
the staging folder stays, holding what could not be uploaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from lightning_gpu_engine.checkpoint.kept import beyond, step_name
from lightning_gpu_engine.checkpoint.lease import Lease
from lightning_gpu_engine.checkpoint.store import Store, StoreError

MANIFEST = "sharded_checkpoint"  # the key that tells a sharded checkpoint's manifest from a checkpoint file
# uploaded as checkpoints; this node's own compile cache; a checkpoint of another URL that --resume named
LOCAL_ONLY = ("checkpoints/", "compile-cache/", "resumed/")


def manifest(folder: str, files: dict[str, int], step: int) -> bytes:
    return json.dumps({MANIFEST: folder, "files": files, "step": step}, indent=1).encode()


def read_manifest(data: bytes) -> dict[str, Any] | None:
    try:
        found = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return found if isinstance(found, dict) and isinstance(found.get(MANIFEST), str) else None


def own_part(name: str, rank: int) -> bool:
    """Whether a rank wrote this file of a sharded save: DCP's `__<rank>_<n>.distcp`; rank 0 the rest too."""
    found = re.match(r"__(\d+)_", name)
    return int(found.group(1)) == rank if found else rank == 0


class Mirror:
    def __init__(self, store: Store, local: Path, given: dict[str, Any]) -> None:
        self.store, self.local, self.given = store, local, given  # given: --output-dir and --resume as typed
        self.failure: StoreError | None = None
        self.sent: dict[str, tuple[int, int]] = {}  # what the store has of each other file: (size, mtime)
        self.lease: Lease | None = None
        self.lock_handle: Any = None  # the staging folder's lock (staging.py), held for the run
        self.guard = threading.Lock()  # the training thread's failure and a background save's

    def rel(self, path: Path) -> str:
        """A path's name in the store. A sharded save's part is written where rank 0 says, in rank 0's staging folder,
        named as this rank's is but for the ranks (staging.py): the folder of the same URL."""
        path = Path(os.path.abspath(path))
        same_url = self.local.name.split("-")[0] + "-"
        root = next((p for p in path.parents if p.name.startswith(same_url)), self.local)
        return path.relative_to(root).as_posix()

    def shown(self, path: str | Path) -> str:
        """A path in the staging folder as its URL in the store."""
        try:
            return self.store.where(self.rel(Path(path)))
        except ValueError:
            return str(path)

    def _do(self, consequence: str, *steps: Any) -> None:
        """Each (function, args...) in turn; the first StoreError is kept, said with its `consequence`, and raised.
        The training thread's uploads and a background save's go on side by side (boto3's client is thread-safe)."""
        if self.failure is not None:
            raise self.failure
        try:
            if self.lease is not None and self.lease.lost:
                raise StoreError(f"another run ({self.lease.lost}) took over {self.store.where('.lock')}")
            for call, *args in steps:
                call(*args)
        except StoreError as err:
            with self.guard:  # the first failure is the one the run reports
                self.failure = self.failure or StoreError(f"{err}; {consequence}")
            raise self.failure from None

    def _kept(self, what: str, path: Path) -> str:
        return (
            f"the store keeps its {what} as they were, and this run's newer ones are on this node in {path}: once the "
            "store answers, --resume last continues from the store's last.ckpt"
        )

    def put_parts(self, folder: Path, rank: int) -> None:
        """Every rank, once its part of a sharded save is on disk: uploads the files it wrote."""
        mine = sorted(p for p in folder.iterdir() if p.is_file() and own_part(p.name, rank))
        self._do(self._kept("checkpoints", folder), *[(self.store.upload, p, self.rel(p)) for p in mine])

    def put_checkpoint(self, final: Path, step: int) -> None:
        """Rank 0, once `final` is published on disk (and a sharded one's parts are up): the checkpoint as a whole."""
        rel = self.rel(final)
        if final.is_symlink():
            folder = final.resolve()
            files = {p.name: p.stat().st_size for p in folder.iterdir()}
            put: tuple[Any, ...] = (self.store.write, rel, manifest(folder.name, files, step))
        else:
            folder, put = final, (self.store.upload, final, rel)
        self._do(self._kept(f"checkpoints ({final.name} too)", final), put, (self._drop_folders, rel, folder.name))

    def keep_step(self, last: Path, step: int, keep: int) -> None:
        """--keep-last: the store's last.ckpt, just put, copied within the store to step-<step>.ckpt; then the step
        checkpoints past the `keep` newest are deleted."""
        rel, name = self.rel(last), step_name(step)
        folder = rel.rsplit("/", 1)[0]
        steps: list[tuple[Any, ...]] = []
        if last.is_symlink():
            source = last.resolve().name
            copy = f".{name}.shards-{source.rsplit('-', 1)[1]}"
            files = {p.name: p.stat().st_size for p in last.resolve().iterdir()}
            steps = [(self.store.copy, f"{folder}/{source}/{f}", f"{folder}/{copy}/{f}") for f in files]
            steps += [(self.store.write, f"{folder}/{name}", manifest(copy, files, step))]
            steps += [(self._drop_folders, f"{folder}/{name}", copy)]
        else:
            steps = [(self.store.copy, rel, f"{folder}/{name}"), (self._drop_folders, f"{folder}/{name}", None)]
        self._do(self._kept(f"{keep} newest step checkpoints", last), *steps, (self._rotate, folder, keep))

    def _rotate(self, folder: str, keep: int) -> None:
        saved = {rel.rsplit("/", 1)[1]: e.modified for rel, e in self.store.listing(f"{folder}/step-").items()}
        for name in beyond(saved, keep):
            self._remove(f"{folder}/{name}")

    def _drop_folders(self, rel: str, keep: str | None) -> None:
        """The store's folders of the checkpoint `rel` but `keep`: what an earlier save of the name left."""
        folder, _, name = rel.rpartition("/")  # hpc_ckpt_N.ckpt lies at the top
        shards = f"{folder}/.{name}.shards-" if folder else f".{name}.shards-"
        stale = [k for k in self.store.listing(shards) if k.split("/")[-2] != keep]
        if stale:
            self.store.delete(stale)

    def _remove(self, rel: str) -> None:
        self.store.delete([rel])  # the name first: it never points at a folder that is going
        self._drop_folders(rel, None)

    def removed(self, final: Path) -> None:
        """A checkpoint removed on disk (ModelCheckpoint's earlier best): removed from the store too."""
        self._do(f"{final.name} may be left in the store", (self._remove, self.rel(final)))

    def sync_files(self) -> None:
        """config.yaml, the logs and every other file but the checkpoints that changed since they were last sent."""
        changed = []
        for path in sorted(self.local.rglob("*")):
            rel = self.rel(path)
            hidden = any(part.startswith(".") for part in rel.split("/"))
            if hidden or not path.is_file() or rel.startswith(LOCAL_ONLY) or rel.startswith("hpc_ckpt_"):
                continue
            stat = path.stat()
            if self.sent.get(rel) != (stat.st_size, stat.st_mtime_ns):
                changed.append((path, rel, (stat.st_size, stat.st_mtime_ns)))
        steps = [(self._send, path, rel, stamp) for path, rel, stamp in changed]
        self._do(self._kept("checkpoints and logs", self.local), *steps)

    def _send(self, path: Path, rel: str, stamp: tuple[int, int]) -> None:
        if path.suffix == ".yaml":  # the run's own options as given, the URL in place of the staging folder
            text = path.read_text()
            if rel == "config.yaml":
                options = yaml.safe_load(text) or {}
                options.update(self.given)
                text = yaml.safe_dump(options, sort_keys=False)
            self.store.write(rel, text.replace(str(self.local), self.store.url).encode())
        else:
            self.store.upload(path, rel)
        self.sent[rel] = stamp

    @contextmanager
    def held(self, first: bool) -> Iterator[None]:
        """The run's time in the store: the lease (global rank 0), then at the end the last files sent, the lease let
        go, and the staging folder removed unless it holds what the store did not get."""
        if first:
            self.lease = Lease(self.store)
            self.lease.take()
        try:
            yield
        except BaseException:
            self._end(first, finished=False)
            raise
        self._end(first, finished=True)

    def _end(self, first: bool, finished: bool) -> None:
        try:
            if first and self.failure is None:
                self.sync_files()
        except StoreError as err:
            print(f"error: --output-dir: {err}", file=sys.stderr, flush=True)
            if finished:
                raise SystemExit(1) from None
        finally:
            if self.lease is not None and self.failure is None:
                self.lease.release()
            if self.failure is None:
                shutil.rmtree(self.local, ignore_errors=True)
                with contextlib.suppress(OSError):  # the folder of every run's staging, if this was the last
                    self.local.parent.rmdir()
