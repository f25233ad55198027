"""The interpreter that warm_starts.py forks runs from: started as `python zygote.py FD`, it imports torch and
Lightning once, then forks a child for each request on the socket FD. The child takes the request's standard streams,
folder, environment, arguments and session, and runs the script or module as `python SCRIPT` or `python -m MODULE`
would, down to the interpreter's own exit (atexit, flushing, an uncaught exception's traceback and exit status 1).

It imports nothing of the engine: the child imports the engine (and the task) itself, from its own PYTHONPATH."""

import contextlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import tempfile
import threading


def started(control: socket.socket) -> list[bytes] | None:
    """Imports what every run would; says ready, or why not (then the runs start fresh). What the imports printed to
    stdout and stderr, each child prints first, as a fresh process would."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        held = [os.dup(1), os.dup(2)]
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            import lightning  # noqa: F401
            import torch
        except BaseException as error:  # a test's stand-in torch raises on purpose: such runs import it themselves
            control.send(f"failed: {type(error).__name__}: {error}".encode())
            return None
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for number, fd in zip((1, 2), held, strict=True):
                os.dup2(fd, number)
                os.close(fd)
        threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else threading.active_count()
        if threads > 1 or torch.cuda.is_initialized():  # a fork copies one thread, and CUDA cannot cross a fork
            control.send(f"failed: {threads} threads after the imports".encode())
            return None
        control.send(b"ready")
        out.seek(0)
        err.seek(0)
        return [out.read(), err.read()]


def reap(channels: dict[int, socket.socket]) -> None:
    """Tells each ended child's requester its exit status, as Popen.returncode gives it."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        channel = channels.pop(pid, None)
        if channel is not None:
            with contextlib.suppress(OSError):  # the requester may be gone
                channel.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            channel.close()


def serve(control: socket.socket, printed: list[bytes]) -> dict:
    """Forks a child per request until the requester closes the socket; returns only in a child, set up as the
    request asks."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd hears of each ended child
    channels: dict[int, socket.socket] = {}
    while True:
        ready = select.select([control.fileno(), wake_read], [], [])[0]
        if wake_read in ready:
            while True:
                try:
                    os.read(wake_read, 512)
                except BlockingIOError:
                    break
        reap(channels)
        if control.fileno() not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
        if not message:  # the requester is done; a child still running is its own, as a Popen's would be
            os._exit(0)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for held in (control, *channels.values()):
                held.detach()
            return child(request, fds, printed)
        for fd in fds[:3]:
            os.close(fd)
        channels[pid] = socket.socket(fileno=fds[3])
        channels[pid].sendall(f"{pid}\n".encode())


def child(request: dict, fds: list[int], printed: list[bytes]) -> dict:
    if request["new_session"]:
        os.setsid()
    for number, fd in enumerate(fds[:3]):
        os.dup2(fd, number)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as a fresh process holds: its three streams alone
    for number, said in zip((1, 2), printed, strict=True):
        os.write(number, said)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    return request


if __name__ == "__main__":
    del sys.path[0]  # this file's folder: the child puts its script's or working folder there
    control = socket.socket(fileno=int(sys.argv[1]))
    printed = started(control)
    if printed is None:
        sys.exit(0)
    run = serve(control, printed)
    del control
    sys.argv = list(run["argv"])
    if run["module"]:  # python -m MODULE: the working folder first on the path, as -m puts it
        sys.path.insert(0, os.getcwd())
        runpy.run_module(run["module"], run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, os.path.dirname(os.path.realpath(sys.argv[0])))
        runpy.run_path(sys.argv[0], run_name="__main__")
