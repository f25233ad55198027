"""The two ends of a warm start (warm_starts.py): `Interpreter`, one zygote.py as the suite's process talks to it, and
`WarmProcess`, a run it forked, as the test that started it sees it."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

ZYGOTE = Path(__file__).with_name("zygote.py")
READY_TIMEOUT = 180  # seconds an interpreter may take to import torch and Lightning on a loaded machine


def read_line(channel: socket.socket, said: bytes, timeout: float | None) -> tuple[bytes, bool]:
    """`said` and what `channel` says after it, up to a whole line; whether that line came within `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not said.endswith(b"\n"):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([channel], [], [], left)[0]:
            return said, False
        part = channel.recv(64)
        if not part:
            raise ChildProcessError("the interpreter ended")
        said += part
    return said, True


class Interpreter:
    """One zygote.py, started with one environment."""

    def __init__(self, executable: str, env: dict[str, str]) -> None:
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [executable, str(ZYGOTE), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        ready = select.select([self.control], [], [], READY_TIMEOUT)[0]
        said = self.control.recv(4096) if ready else b"no answer"
        if said != b"ready":
            self.close()
            raise OSError(said.decode(errors="replace"))

    def fork(self, request: dict[str, Any], fds: list[int]) -> tuple[int, socket.socket]:
        ours, theirs = socket.socketpair()
        with theirs:
            socket.send_fds(self.control, [json.dumps(request).encode()], [*fds, theirs.fileno()])
        try:
            said, _ = read_line(ours, b"", None)
        except ChildProcessError:
            ours.close()
            raise
        return int(said), ours

    def close(self) -> None:
        self.control.close()  # it exits when it reads the end
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class WarmProcess(subprocess.Popen[Any]):
    """A forked run: a Popen whose process the interpreter started, and whose exit status it reports."""

    _child_created = False  # Popen's own clean-up has nothing to wait for

    def __init__(  # not Popen's, which would start a fresh process
        self, args: list[str], pid: int, channel: socket.socket, stdout: IO[Any] | None, stderr: IO[Any] | None
    ) -> None:
        self.args, self.pid, self.stdin, self.stdout, self.stderr = args, pid, None, stdout, stderr
        self.returncode: int | None = None  # type: ignore[misc]
        self._channel, self._said = channel, b""
        self._read: dict[int, tuple[threading.Thread, list[Any]]] = {}

    def _status(self, timeout: float | None) -> int | None:
        """The exit status, as the interpreter reports it once the run ends; None if not within `timeout`."""
        if self.returncode is None:
            self._said, whole = read_line(self._channel, self._said, timeout)
            if not whole:
                return None
            self.returncode = int(self._said)
            self._channel.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        status = self._status(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return status

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        if input is not None:
            raise ValueError("a warm start has no stdin pipe")
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = [s for s in (self.stdout, self.stderr) if s is not None]
        for stream in streams:  # a reader each, as Popen has: neither pipe may fill while the other is read
            if id(stream) not in self._read:
                box: list[Any] = []
                reader = threading.Thread(target=lambda s=stream, b=box: b.append(s.read()), daemon=True)
                reader.start()
                self._read[id(stream)] = (reader, box)
        for stream in streams:
            reader, _ = self._read[id(stream)]
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out, err = ((self._read[id(s)][1][0] if s is not None else None) for s in (self.stdout, self.stderr))
        return out, err

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()
