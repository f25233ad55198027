"""What the runs of every test on one machine share, and how the suite keeps them from fighting over it.

- Ports: a store that processes started next bind (MASTER_PORT, torchrun's endpoint) is picked from this worker's own
  range, below the kernel's ephemeral range, so no other test and no outgoing connection is handed it in between.
  A caller running several suites at once (the template's CI) gives each its own range in TEST_PORT_RANGE.
- Caches: every library cache the runs would share across the machine (LitData's index, inductor's, Hugging Face's,
  torch hub's, matplotlib's, W&B's) is the session's own; its inductor cache, one folder for the session's compiled
  runs that are not about the cache, is the one shared on purpose.
- Cores: a test that starts several processes of one run (DDP ranks, torchrun, nodes) holds a lock, machine-wide
  when TEST_MULTIPROCESS_LOCK names one, so two such tests never share the cores.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

PORT_RANGE = "TEST_PORT_RANGE"  # "FIRST-LAST": the ports this suite draws from, given by whoever runs several suites
MULTIPROCESS_LOCK = "TEST_MULTIPROCESS_LOCK"  # a file path, the same for every suite on the machine
LOWEST_PORT = 10000  # below: well-known and registered services
# Each library's cache, by the variable it reads, under the session's folder
CACHES = {
    "TMPDIR": "tmp",  # the engine's LitData index cache ($TMPDIR/litdata), and every other temporary file
    "LITDATA_CACHE_DIR": "litdata",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",  # --compile-cache none: the session's compiled runs share it
    "TRITON_CACHE_DIR": "inductor/triton",
    "HF_HOME": "huggingface",
    "TORCH_HOME": "torch",
    "MPLCONFIGDIR": "matplotlib",
    "WANDB_CACHE_DIR": "wandb/cache",
    "WANDB_CONFIG_DIR": "wandb/config",
    "WANDB_DATA_DIR": "wandb/data",
    "WANDB_ARTIFACT_DIR": "wandb/artifacts",
}


def session_folder(basetemp: Path) -> Path:
    """The folder of this pytest run, which its xdist workers (each with a base folder of its own in it) share."""
    return basetemp.parent if "PYTEST_XDIST_WORKER" in os.environ else basetemp


def first_ephemeral() -> int:
    """Where the kernel's range for bind(0) and outgoing connections starts."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):  # not Linux: IANA's range, which macOS and Windows use
        return 49152


def port_range() -> range:
    """This process's ports: the suite's range (TEST_PORT_RANGE, else all below the ephemeral range), one slice of it
    per xdist worker."""
    given = os.environ.get(PORT_RANGE)
    first, last = map(int, given.split("-")) if given else (LOWEST_PORT, first_ephemeral() - 1)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    size = (last + 1 - first) // workers
    return range(first + worker * size, first + (worker + 1) * size)


def free_port() -> int:
    """A port of this process's range that nothing has bound now."""
    pick = random.SystemRandom()
    ports = port_range()
    while True:
        port = pick.choice(ports)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # bound by another of our runs now: try another
                continue
            return port


def private_caches(root: Path) -> dict[str, str]:
    """CACHES's variables, each pointing to a folder made under `root`."""
    for folder in CACHES.values():
        (root / folder).mkdir(parents=True, exist_ok=True)
    return {variable: str(root / folder) for variable, folder in CACHES.items()}


@contextlib.contextmanager
def cores_to_myself(default_lock: Path) -> Iterator[None]:
    """Held while a test's processes of one run go: waits for any other such test on the machine to end."""
    lock = Path(os.environ.get(MULTIPROCESS_LOCK) or default_lock)
    with open(lock, "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        yield
