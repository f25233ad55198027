"""An S3 server on 127.0.0.1 for the tests of an object-storage --output-dir, and a relay in front of it that a test
turns off, stalls or turns back on, as an endpoint that goes down or stops answering in the middle of a run would.

The server is moto's server mode, a real HTTP endpoint: boto3 reaches it through AWS_ENDPOINT_URL as it reaches MinIO
or AWS, and nothing of boto3 is replaced. The runs talk to it through the relay; the tests look at the bucket directly.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lightning_gpu_engine.checkpoint.staging import fetch
from lightning_gpu_engine.checkpoint.store_s3 import S3Store

KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
_buckets = itertools.count()


def start_s3_server(env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
    """moto's server, in a session of its own, and its port (the server binds a free one itself and names it)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    assert server.stderr is not None
    port = 0
    for line in server.stderr:  # werkzeug's "* Running on http://127.0.0.1:PORT", within its first lines
        found = re.search(r"Running on http://127\.0\.0\.1:(\d+)", line)
        if found:
            port = int(found.group(1))
            break
    assert port, "the moto server did not start"
    threading.Thread(target=server.stderr.read, daemon=True).start()  # its request log must not fill the pipe
    return server, port


def stop_s3_server(server: subprocess.Popen[str]) -> None:
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()


class Relay:
    """A TCP relay to the server on `port`: `down()` refuses new connections and cuts the open ones, `stall()`
    accepts and forwards nothing (a store that stops answering), `up()` relays again."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.flowing = threading.Event()
        self.flowing.set()
        self.open: list[socket.socket] = []
        self.guard = threading.Lock()
        self.listener = self._listen(0)
        self.port = self.listener.getsockname()[1]

    def _listen(self, port: int) -> socket.socket:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return listener

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by down()
                return
            upstream = socket.create_connection(self.target)
            with self.guard:
                self.open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                self.flowing.wait()
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def down(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # what wakes the thread waiting in accept()
        self.listener.close()
        self._cut()

    def stall(self) -> None:
        self.flowing.clear()

    def up(self) -> None:
        self._cut()  # what was stalled never arrives
        self.flowing.set()
        if self.listener.fileno() == -1:
            self.listener = self._listen(self.port)

    def _cut(self) -> None:
        with self.guard:
            sockets, self.open = self.open, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, as a crash
                sock.close()


@dataclass
class Bucket:
    """A fresh bucket of the test's own on the session's server, reached by the runs through `relay`."""

    name: str
    port: int
    relay: Relay

    @property
    def url(self) -> str:
        return f"s3://{self.name}"

    def env(self, tmpdir: Path | None = None) -> dict[str, str]:
        """What a run needs to reach the bucket (through the relay), and where its node keeps its staging folder."""
        if tmpdir is not None:
            tmpdir.mkdir(parents=True, exist_ok=True)  # else Python's tempfile falls back to /tmp
        folder = {"TMPDIR": str(tmpdir)} if tmpdir is not None else {}
        return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.relay.port}", **KEYS, **folder}

    def store(self, prefix: str = "") -> S3Store:
        """The bucket as the engine sees it, reached directly, whatever the relay does."""
        with pytest.MonkeyPatch.context() as patch:
            for name, value in {**KEYS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}"}.items():
                patch.setenv(name, value)
            return S3Store(f"{self.url}/{prefix}" if prefix else self.url, timeout=30)

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(self.store(prefix).listing())

    def fetch(self, prefix: str, rel: str, into: Path) -> Path:
        """The object (a sharded checkpoint's manifest: its whole folder) as a local path."""
        fetch(self.store(prefix), rel, into)
        return into


@pytest.fixture(scope="session", name="s3_server")
def moto_server() -> Iterator[tuple[int, Relay]]:
    server, port = start_s3_server()
    try:
        yield port, Relay(port)
    finally:
        stop_s3_server(server)


@pytest.fixture(name="bucket")
def fresh_bucket(s3_server: tuple[int, Relay]) -> Iterator[Bucket]:
    port, relay = s3_server
    made = Bucket(f"runs-{os.getpid()}-{next(_buckets)}", port, relay)
    made.store().client.create_bucket(Bucket=made.name)
    try:
        yield made
    finally:
        relay.up()
