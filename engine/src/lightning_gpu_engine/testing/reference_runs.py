"""Uninterrupted reference runs, each trained once per pytest run and copied to every test that compares a stopped and
resumed run against it, whatever its file and xdist worker: a run is known by its command, its output folders left
out (named by placeholders), so tests that train the same reference share it."""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from lightning_gpu_engine.testing import warm_starts

TIMEOUT = 600  # seconds a reference run may take before its tests fail as hung


class ReferenceRuns:
    """The runs under `root`, a folder every xdist worker of the session shares; a lock file per run lets one worker
    train it while the others wait for it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def copy(self, command: Sequence[str], into: dict[str, Path], cwd: Path, env: dict[str, str]) -> str:
        """What `command` printed, its output folders copied to `into`'s paths: each `{name}` in an argument stands
        for the folder into[name]. Trained now unless this run has trained that command before."""
        key = hashlib.sha256(json.dumps([list(command), str(cwd)]).encode()).hexdigest()[:16]
        folder, printed = self.root / key, self.root / key / "printed.txt"
        with open(self.root / f"{key}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not printed.exists():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                filled = [_fill(arg, {name: folder / name for name in into}) for arg in command]
                done = warm_starts.run(
                    filled, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, start_new_session=True
                )
                assert done.returncode == 0, f"the reference run {' '.join(filled)} failed:\n{done.stdout[-3000:]}"
                printed.write_text(done.stdout + done.stderr)
        for name, target in into.items():
            shutil.copytree(folder / name, target, symlinks=True)
        return printed.read_text()


def _fill(arg: str, folders: dict[str, Path]) -> str:
    for name, folder in folders.items():
        arg = arg.replace("{" + name + "}", str(folder))
    return arg
