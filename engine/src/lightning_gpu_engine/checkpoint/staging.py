"""`--output-dir s3://bucket/prefix` (or any URL fsspec has a filesystem for): the run works in a staging folder on
this node, `$TMPDIR/lightning-gpu-engine-staging/<hash of the URL>-<node>.<local rank>`, which mirror.py mirrors to
the store. Resolved before torch loads, so that a store that is missing, refusing or down is one line at once.

At the start the folder is emptied (the store is the run's truth: what a killed run left here is stale) and filled with
what `--resume` needs from the store: `last` its checkpoints/last.ckpt, `auto` the newest of that and SLURM's
hpc_ckpt_N.ckpt (or nothing: a fresh start), a URL that checkpoint; and with it the best checkpoint, the logs and
validation.jsonl, which the resumed run continues. Then the run's --output-dir is the staging folder, and the rest of
the engine works as on any disk. Each rank has a folder of its own (each downloads the checkpoint it resumes from).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lightning_gpu_engine.checkpoint.mirror import Mirror, read_manifest
from lightning_gpu_engine.checkpoint.store import MANIFEST_MAX, Entry, Store, StoreError, is_url
from lightning_gpu_engine.checkpoint.store_fsspec import FsspecStore
from lightning_gpu_engine.checkpoint.store_s3 import S3Store
from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.tools.rundir import hold_output_dir, take_lock

HPC = re.compile(r"^hpc_ckpt_\d+\.ckpt$")
_STAGED: Mirror | None = None


def staged() -> Mirror | None:
    """This process's mirror, when its --output-dir is a URL."""
    return _STAGED


def shown(path: str | Path) -> str:
    """Where a path of the run's output lies for its user: its URL in the store when the run is staged."""
    return _STAGED.shown(path) if _STAGED is not None else str(path)


@contextmanager
def hold_output(cfg: Config, is_global_zero: bool) -> Iterator[None]:
    """The run's hold on its --output-dir: the folder's lock (rundir.py), or for a URL the store's lease, and at the
    end the last uploads (mirror.py)."""
    if _STAGED is None:
        with hold_output_dir(cfg, is_global_zero):
            yield
        return
    with _STAGED.held(is_global_zero):  # its staging folder is locked already, since stage_output
        yield


def staging_dir(url: str) -> Path:
    node = next((os.environ[v] for v in ("NODE_RANK", "GROUP_RANK", "SLURM_NODEID") if v in os.environ), "0")
    local = next((os.environ[v] for v in ("LOCAL_RANK", "SLURM_LOCALID") if v in os.environ), "0")
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "lightning-gpu-engine-staging" / f"{digest}-{node}.{local}"


def stage_output(cfg: Config) -> None:
    """An --output-dir URL: checked, its staging folder made and filled for --resume, and `cfg` pointed at it."""
    global _STAGED
    if is_url(cfg.resume) and not is_url(cfg.output_dir):
        raise ConfigError("resume", "a URL is read where --output-dir is one too; download the checkpoint first")
    if not is_url(cfg.output_dir):
        return
    try:
        store = open_store(cfg.output_dir, cfg.store_timeout)
    except ValueError as err:
        raise ConfigError("output_dir", str(err)) from None
    try:  # the first request: a missing bucket, refused credentials or a store that is down show here
        found = {**store.listing("checkpoints/"), **store.listing("hpc_ckpt_")}
    except StoreError as err:
        raise ConfigError("output_dir", f"{err}; nothing was written") from None
    chosen = _chosen(cfg, store, found)
    local = staging_dir(cfg.output_dir)
    mirror = Mirror(store, local, {"output_dir": cfg.output_dir, "resume": cfg.resume})
    mirror.lock_handle = _emptied(local)
    if chosen is not None:
        source, rel = chosen
        target = local / (rel if source is store else f"resumed/{rel.rsplit('/', 1)[-1]}")
        try:
            fetch(source, rel, target, found.get(rel) if source is store else None)
            if source is store:  # what the resumed run continues: its best checkpoint, logs and validations
                best = [(k, e) for k, e in found.items() if k.startswith("checkpoints/best-") and "/" not in k[12:]]
                for more, entry in [*best, *store.listing("logs/").items(), *store.listing("validation.jsonl").items()]:
                    fetch(store, more, local / more, entry)
                    stat = (local / more).stat()
                    mirror.sent[more] = (stat.st_size, stat.st_mtime_ns)  # in the store as it is here
        except StoreError as err:
            raise ConfigError("resume", f"{err}; nothing was written") from None
        if is_url(cfg.resume):
            cfg.resume = str(target)
    cfg.output_dir = str(local)
    _STAGED = mirror


def _chosen(cfg: Config, store: Store, found: dict[str, Entry]) -> tuple[Store, str] | None:
    """The store and path of the checkpoint --resume asks for; ConfigError as for a local --output-dir."""
    held = [k for k in found if k == "checkpoints/last.ckpt" or HPC.match(k)]
    if cfg.resume is None and held:
        how = "--resume auto" if any(HPC.match(k) for k in held) else "--resume last"
        raise ConfigError(
            "output_dir",
            f"{store.url} already holds a run ({store.where(held[0])}); continue it with {how}, or give another "
            "--output-dir",
        )
    if cfg.resume == "auto":
        return (store, max(held, key=lambda k: (found[k].modified, k.startswith("hpc")))) if held else None
    if cfg.resume == "last":
        if "checkpoints/last.ckpt" not in found:
            where = store.where("checkpoints/last.ckpt")
            raise ConfigError("resume", f"no checkpoint at {where}; 'auto' starts afresh when there is none")
        return store, "checkpoints/last.ckpt"
    if not is_url(cfg.resume):
        return None
    url = str(cfg.resume)
    if url.startswith(store.url + "/"):
        source, rel = store, url[len(store.url) + 1 :]
    else:
        folder, rel = url.rsplit("/", 1)
        try:
            source = open_store(folder, cfg.store_timeout)
        except ValueError as err:
            raise ConfigError("resume", str(err)) from None
    try:
        there = rel in found or rel in source.listing(rel)
    except StoreError as err:
        raise ConfigError("resume", f"{err}; nothing was written") from None
    if not there:
        raise ConfigError("resume", f"no checkpoint at {url}; give one the store holds")
    return source, rel


def fetch(store: Store, rel: str, local: Path, entry: Entry | None = None) -> None:
    """The object `rel` as the file `local`; a sharded checkpoint's manifest as the folder it names, `local` a link
    to it, as sharded.py publishes one."""
    small = entry is None or entry.size <= MANIFEST_MAX
    found = store.read(rel) if small else None
    named = read_manifest(found[0]) if found is not None else None
    if named is None:
        if found is not None:
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(found[0])
        else:
            store.download(rel, local)
        return
    parent, folder = rel.rsplit("/", 1)[0] if "/" in rel else "", named["sharded_checkpoint"]
    for name, size in named["files"].items():
        part = local.with_name(folder) / name
        store.download(f"{parent}/{folder}/{name}" if parent else f"{folder}/{name}", part)
        if part.stat().st_size != size:
            got = part.stat().st_size
            raise StoreError(f"cannot read {store.where(rel)}: its part {name} has {got} bytes, not {size}")
    link = local.with_name(f".{local.name}.link")
    link.unlink(missing_ok=True)
    os.symlink(folder, link)
    os.replace(link, local)


def _emptied(local: Path) -> object:
    """The staging folder, locked by this process for the run and emptied of what an earlier run left."""
    local.mkdir(parents=True, exist_ok=True)
    handle = open(local / ".lock", "a+b", buffering=0)  # noqa: SIM115 - held until the process ends
    take_lock(handle, local)
    handle.truncate(0)
    handle.write(str(os.getpid()).encode())
    for item in local.iterdir():
        if item.name != ".lock":
            shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()
    return handle


def open_store(url: str, timeout: float) -> Store:
    """The store of `url`; ValueError (what to install or give instead) for a scheme with no filesystem here."""
    scheme = url.partition("://")[0]
    if scheme == "s3":
        return S3Store(url, timeout)
    import fsspec

    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError as err:  # fsspec's own words name the package: "Please install gcsfs to access Google Storage"
        raise ValueError(f"{url}: {err}") from None
    except ValueError:
        raise ValueError(f"no filesystem here knows {scheme}://; give s3://bucket/prefix or a local folder") from None
    return FsspecStore(url, timeout)
