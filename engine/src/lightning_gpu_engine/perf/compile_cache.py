"""torch.compile's caches kept with the run, so that a restart, a requeue or another node starts from compiled code.

Inductor keeps its compiled graphs (and Triton its kernels) in /tmp/torchinductor_<user> unless told otherwise: on a
cluster that is node-local, and empty on the node a requeued job lands on. Before anything is compiled, both are
pointed at --compile-cache (by default <output-dir>/compile-cache, on the filesystem the checkpoints are on), and the
artifacts file there is loaded: torch's portable bundle of the compiled graphs, which global rank 0 saves whole after
the first training step (compile_artifacts.py), a single file to copy where the folder cannot follow. It names the
torch and the device that made it: torch promises nothing about another version reading it, and code made for one GPU
is not another's, so such a file is passed over with one line, like an unreadable one, and replaced by this run's.
Light (no torch): run.py checks --compile-cache with the other paths, before the heavy imports.
"""

from __future__ import annotations

import time
from pathlib import Path

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.tools.rundir import check_writable_dir

STARTED = time.monotonic()  # imported as the run starts (run.py, before torch): the clock of the first-step line


def cache_dir(cfg: Config) -> Path | None:
    """The folder the run's compile caches go to; None: torch's own (--compile-cache none)."""
    if cfg.compile_cache == "none":
        return None
    return Path(cfg.output_dir) / "compile-cache" if cfg.compile_cache == "auto" else Path(cfg.compile_cache)


def check_compile_cache(cfg: Config) -> None:
    """A folder that is, or can be made, and written in: ConfigError for --compile-cache otherwise."""
    directory = cache_dir(cfg)
    if directory is not None:
        check_writable_dir(directory, "compile_cache")
