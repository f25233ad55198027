"""One run per object-storage --output-dir: a lease object, `<url>/.lock`, created with a conditional write.

A local lock is dropped by the operating system when its process ends; nothing drops an object when a node is lost.
So the lock is a lease: created only where none exists (S3's `If-None-Match: *`, atomic on the server), naming its
owner (host, pid), and renewed every RENEW_S seconds, each renewal conditional on the lease still being the owner's
own version (`If-Match`). A run that finds a lease waits to see it renewed (then another run is alive there: refused in
one line), or lets it age, by the store's own clock, past LEASE_S without renewal (its run has ended without letting go:
a lost node, kill -9), and takes it over with a conditional write that only one contender can win. A lease of this host
whose pid has ended is taken over at once. The run deletes its lease when it ends, however it ends but kill -9.
A store without conditional writes (or an fsspec filesystem) is said in one line to be unguarded, and the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import warnings

from lightning_gpu_engine.checkpoint.store import Conflict, Store, StoreError, Unsupported
from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.tools.rundir import alive

LEASE_S = 60.0  # a lease this long without renewal belongs to a run that ended without letting go
RENEW_S = 10.0  # how often a run renews its lease: a run waiting at the door sees it alive within this


def owner() -> dict[str, object]:
    """Who holds the lease: a host name, and the pid namespace, which containers on one host do not share."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return {"host": socket.gethostname(), "pid": os.getpid(), "namespace": namespace}


class Lease:
    def __init__(self, store: Store, rel: str = ".lock") -> None:
        self.store, self.rel = store, rel
        self.version: str | None = None
        self.lost: str | None = None  # who took the lease over while this run held it
        self.stop = threading.Event()
        self.renewing: threading.Thread | None = None

    def take(self) -> None:
        """Holds the lease, or ConfigError naming the run that holds it."""
        where = self.store.where(self.rel)
        if not self.store.guarded:
            self._unguarded(f"{self.store.scheme}:// has no conditional writes")
            return
        me = json.dumps(owner()).encode()
        try:
            try:
                self.version = self.store.write(self.rel, me, absent=True)
            except Conflict:
                self.version = self._take_over(me, where)
        except Unsupported as err:
            self._unguarded(str(err))
            return
        except StoreError as err:  # a race lost to another run is one too, said as such
            raise ConfigError("output_dir", f"{err}; nothing was written") from None
        self.renewing = threading.Thread(target=self._renew, name="lease-renewal", daemon=True)
        self.renewing.start()

    def _unguarded(self, why: str) -> None:
        warnings.warn(
            f"{self.store.url} is unguarded: {why}, so nothing keeps a second run out of this --output-dir while "
            "this one runs",
            stacklevel=3,
        )

    def _take_over(self, me: bytes, where: str) -> str:
        said, seen = False, None
        while True:
            found = self.store.read(self.rel)
            if found is None:  # let go meanwhile
                return self.store.write(self.rel, me, absent=True)
            data, version, age = found
            holder = _holder(data)
            here = {k: holder.get(k) for k in ("host", "namespace")} == {k: owner()[k] for k in ("host", "namespace")}
            pid = holder.get("pid")
            if (seen is not None and version != seen) or (here and isinstance(pid, int) and alive(pid)):
                raise ConfigError(
                    "output_dir",
                    f"another run ({holder.get('host')}, pid {pid}) is using {self.store.url} (its lease {where} is "
                    "renewed as it runs); wait for it, or give another --output-dir",
                )
            if age >= LEASE_S or (here and isinstance(pid, int)):  # renewed no more, or its process has ended
                try:
                    return self.store.write(self.rel, me, replacing=version)
                except Conflict:
                    raise ConfigError(
                        "output_dir", f"another run took over {where} as this one did; give another --output-dir"
                    ) from None
            if not said:
                print(
                    f"note: {where} is held by {holder.get('host')} pid {holder.get('pid')}, renewed {age:.0f} s ago; "
                    f"waiting up to {LEASE_S - age:.0f} s to see whether that run is alive",
                    flush=True,
                )
                said = True
            seen = version
            time.sleep(1.0)

    def _renew(self) -> None:
        while not self.stop.wait(RENEW_S):
            try:
                self.version = self.store.write(self.rel, json.dumps(owner()).encode(), replacing=self.version)
            except Conflict:
                found = self.store.read(self.rel)
                holder = _holder(found[0]) if found else {}
                self.lost = f"{holder.get('host')}, pid {holder.get('pid')}"
                return
            except StoreError:  # the store is away: the next save says so; the lease lasts LEASE_S meanwhile
                continue

    def release(self) -> None:
        """Lets go of the lease if this run still holds it; a store that does not answer keeps it until it ages."""
        self.stop.set()
        if self.renewing is not None:  # a renewal under way would change the version deleted below
            self.renewing.join(self.store.timeout)
        if self.version is None or self.lost:
            return
        version, self.version = self.version, None
        with contextlib.suppress(StoreError):
            self.store.delete([self.rel], replacing=version)


def _holder(data: bytes) -> dict[str, object]:
    try:
        found = json.loads(data)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
