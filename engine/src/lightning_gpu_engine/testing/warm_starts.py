"""`python SCRIPT ARGS` and `python -m MODULE ARGS` for the suites, forked from an interpreter that has imported torch
and Lightning already (zygote.py): the same command, in a process of its own, with its own streams, folder,
environment, session and exit status, without the 3-4 s of imports that are about 70% of a tiny run's CPU time.

`popen` and `run` take subprocess's arguments. A command that is not this interpreter running a script or a module
starts fresh, and so does every run where a fork cannot stand for a fresh process: an environment in which torch does
not import (a refusal's test of what it answers before the imports), a machine with a GPU (CUDA does not cross a fork),
or LIGHTNING_GPU_ENGINE_FRESH_STARTS=1 in the environment (to rule warm starts out when a test fails)."""

from __future__ import annotations

import atexit
import functools
import os
import subprocess
import sys
import threading
from collections import OrderedDict
from typing import Any

import torch

from lightning_gpu_engine.testing.interpreter import Interpreter, WarmProcess

FRESH = "LIGHTNING_GPU_ENGINE_FRESH_STARTS"
# Read long after the imports, so runs that differ in them share an interpreter (not RANK or LOCAL_RANK: Lightning
# reads those as it is imported)
VOLATILE = {"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "PYTEST_CURRENT_TEST"}
KEPT = 6  # interpreters held at once, each with torch's memory: the least recently used goes first

_lock = threading.Lock()
_interpreters: OrderedDict[tuple[str, ...], Interpreter | None] = OrderedDict()


def close_all() -> None:
    """Ends every interpreter (each also ends when this process does)."""
    with _lock:
        while _interpreters:
            _, interpreter = _interpreters.popitem()
            if interpreter is not None:
                interpreter.close()


atexit.register(close_all)


def _interpreter(executable: str, env: dict[str, str]) -> Interpreter | None:
    key = (executable, *sorted(f"{k}={v}" for k, v in env.items() if k not in VOLATILE))
    if key in _interpreters:
        _interpreters.move_to_end(key)
        return _interpreters[key]
    try:
        started: Interpreter | None = Interpreter(executable, env)
    except OSError:  # torch does not import in this environment: its runs start fresh
        started = None
    _interpreters[key] = started
    while len(_interpreters) > KEPT:
        _, oldest = _interpreters.popitem(last=False)
        if oldest is not None:
            oldest.close()
    return started


@functools.cache
def _gpu() -> bool:
    return torch.cuda.is_available()


def _target(args: list[str]) -> tuple[str, list[str]] | None:
    """The module, or "" for a script, and the argv a warm start gives; None for any other command."""
    if len(args) < 2 or args[0] != sys.executable:
        return None
    if args[1] == "-m" and len(args) > 2:
        return args[2], ["-m", *args[3:]]
    return None if args[1].startswith("-") else ("", args[1:])


def popen(
    args: list[Any],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    stdout: Any = None,
    stderr: Any = None,
    text: bool = False,
    start_new_session: bool = False,
    **fresh_only: Any,
) -> subprocess.Popen[Any]:
    """subprocess.Popen(args, ...), forked warm where it can be."""
    args = [os.fspath(arg) for arg in args]
    env = dict(os.environ if env is None else env)
    target = _target(args)
    options = dict(cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=text, start_new_session=start_new_session)
    if fresh_only or target is None or "1" in (os.environ.get(FRESH), env.get(FRESH)) or _gpu():
        return subprocess.Popen(args, **options, **fresh_only)
    module, argv = target
    with _lock:
        interpreter = _interpreter(args[0], env)
        if interpreter is None:
            return subprocess.Popen(args, **options)
        sent, ours, mine = [], [], []  # the child's three streams; our ends of its pipes; what we close once sent
        for number, how in enumerate((None, stdout, stderr)):
            if how is None:
                sent.append(number)
            elif how == subprocess.PIPE:
                read, write = os.pipe()
                sent.append(write)
                mine.append(write)
                ours.append(open(read, "r" if text else "rb"))  # noqa: SIM115
            elif how == subprocess.STDOUT:
                sent.append(sent[1])
            elif how == subprocess.DEVNULL:
                sent.append(os.open(os.devnull, os.O_RDWR))
                mine.append(sent[-1])
            else:
                sent.append(how if isinstance(how, int) else how.fileno())
        cwd = os.fspath(cwd or os.getcwd())
        request = {"argv": argv, "module": module, "cwd": cwd, "env": env, "new_session": start_new_session}
        try:
            pid, channel = interpreter.fork(request, sent)
        except OSError:  # the interpreter is gone: this run, and the next of its kind, start fresh
            for stream in ours:
                stream.close()
            _interpreters[next(k for k, v in _interpreters.items() if v is interpreter)] = None
            return subprocess.Popen(args, **options)
        finally:
            for fd in mine:
                os.close(fd)
    out = ours.pop(0) if stdout == subprocess.PIPE else None
    err = ours.pop(0) if stderr == subprocess.PIPE else None
    return WarmProcess(args, pid, channel, out, err)


def run(
    args: list[Any],
    *,
    timeout: float | None = None,
    capture_output: bool = False,
    check: bool = False,
    **options: Any,
) -> subprocess.CompletedProcess[Any]:
    """subprocess.run(args, ...), forked warm where it can be; a run past `timeout` is killed, as there."""
    if capture_output:
        options |= {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    process = popen(args, **options)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise subprocess.TimeoutExpired(process.args, timeout or 0, output=out, stderr=err) from None
    done = subprocess.CompletedProcess(process.args, process.wait(), out, err)
    if check:
        done.check_returncode()
    return done
