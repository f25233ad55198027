"""The engine as a bake installs it: its wheel, built from engine/ by its own backend, in an environment that sees
this one's packages (torch, lightning, hatchling...) through a .pth file, so nothing is downloaded."""

from __future__ import annotations

import fcntl
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[1] / "engine"  # lightning-gpu-engine: its sources, build backend and suite


def venv(where: Path) -> Path:
    """A fresh virtual environment at `where`; its own site-packages hold only what is installed into it. Its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", where], check=True, capture_output=True)
    (next(where.glob("lib/python*/site-packages")) / "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return where / "bin" / "python"


def pip(python: Path, *args: str | Path, cwd: Path) -> str:
    """`pip ARGS` in that environment, offline: no index, and the build backends already installed here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [str(python), "-m", "pip", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="session")
def engine_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of an environment with the engine installed from its wheel, built once per run (xdist workers wait
    for the one that builds it): what the bakes' suites, mypy and the engine's suite run under."""
    sys.path.insert(0, str(ENGINE / "_build"))
    import wheel_backend  # the engine's build backend: what pip, uv and the post-gen hook call

    base = tmp_path_factory.getbasetemp()
    root = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base  # the run's folder, which its workers share
    python = root / "engine-venv" / "bin" / "python"
    with open(root / "engine-venv.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not python.exists():
            wheel = wheel_backend.build(ENGINE, root / "engine-wheel")
            pip(venv(root / "engine-venv"), "install", "-q", "--no-deps", "--no-index", wheel, cwd=root)
    return python
