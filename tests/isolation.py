"""How the template runs the bakes' suites side by side on one machine without their runs fighting.

- Ports: each suite runs in a network namespace of its own, loopback up and nothing else, so no process outside it
  (the other xdist worker's suite) can take a port its runs picked or join their stores. Where the machine refuses
  (no CAP_SYS_ADMIN), each xdist worker hands its suites a port range of its own (TEST_PORT_RANGE), from which every
  multi-process run of theirs takes its MASTER_PORT (the engine's testing/machine_sharing.py).
- Cores: one lock file for the whole run (TEST_MULTIPROCESS_LOCK): a suite's test of several processes holds it.

`python tests/isolation.py CMD...` runs CMD in a namespace of its own.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

CLONE_NEWNET = 0x40000000  # <linux/sched.h>
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # <linux/sockios.h>, <net/if.h>
IFREQ = "16sh22x"  # struct ifreq: the interface's name, then ifr_flags in a 24-byte union
LOWEST_PORT = 10000  # the engine's testing/machine_sharing.py draws from here up to the kernel's ephemeral range


def enter_namespace() -> None:
    """This process in a network namespace of its own, its loopback up (a new namespace's starts down)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack(IFREQ, fcntl.ioctl(sock, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def namespaces_allowed() -> bool:
    """Whether this machine lets a process take a namespace of its own and listen on its loopback there."""
    probe = "import socket; socket.create_server(('127.0.0.1', 0))"
    done = subprocess.run([sys.executable, __file__, sys.executable, "-c", probe], capture_output=True, check=False)
    return done.returncode == 0


def worker_ports() -> str:
    """This xdist worker's slice of the ports below the ephemeral range, as TEST_PORT_RANGE's FIRST-LAST."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 49152
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    size = (ephemeral - LOWEST_PORT) // workers
    return f"{LOWEST_PORT + worker * size}-{LOWEST_PORT + (worker + 1) * size - 1}"


if __name__ == "__main__":
    enter_namespace()
    os.execvp(sys.argv[1], sys.argv[1:])
