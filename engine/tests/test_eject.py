"""`python -m lightning_gpu_engine eject`, all or nothing, on a project of the shape a bake has: sources read as
Python reads them (PEP 263), and a refusal or a failure half-way leaves every byte of the project as it was."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_gpu_engine import eject as ejecting

PYPROJECT = """[project]
name = "team"
dependencies = [
    # the engine, by its wheel
    "lightning-gpu-engine @ {root:uri}/wheels/lightning_gpu_engine-1.0.0-py3-none-any.whl",
    "torch>=2.5",
]
"""
LATIN_1 = "# -*- coding: latin-1 -*-\n# café, as a team's old file spells it\nimport lightning_gpu_engine\n"


def project(root: Path) -> Path:
    """src/team/ with the engine's alias, a task, a latin-1 test file, a script and the bundled wheel."""
    (root / "src" / "team" / "tasks").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "wheels").mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "src" / "team" / "__init__.py").write_text("")
    (root / "src" / "team" / "engine.py").write_text("import lightning_gpu_engine as _engine\n")
    (root / "src" / "team" / "tasks" / "task.py").write_text("from lightning_gpu_engine import Task\n")
    (root / "tests" / "test_old.py").write_bytes(LATIN_1.encode("latin-1"))
    (root / "train.py").write_text("from lightning_gpu_engine import train\n")
    (root / "train.py").chmod(0o755)
    (root / "wheels" / "lightning_gpu_engine-1.0.0-py3-none-any.whl").write_bytes(b"PK wheel")
    return root


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def eject(root: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lightning_gpu_engine", "eject", "--project", str(root)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_eject_rewrites_a_latin_1_file_in_its_own_encoding_and_keeps_a_scripts_mode(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    done = eject(root)
    assert done.returncode == 0, done.stderr
    assert (root / "tests" / "test_old.py").read_bytes() == LATIN_1.replace(
        "lightning_gpu_engine", "team.engine"
    ).encode("latin-1")
    assert (root / "train.py").read_text() == "from team.engine import train\n" and os.access(
        root / "train.py", os.X_OK
    )
    engine = root / "src" / "team" / "engine"
    assert (engine / "__init__.py").is_file() and not (root / "src" / "team" / "engine.py").exists()
    assert "lightning_gpu_engine" not in (engine / "training.py").read_text()
    assert not (engine / "__main__.py").exists() and not (engine / "eject.py").exists()
    assert not list((root / "wheels").iterdir()) and "lightning-gpu-engine" not in (root / "pyproject.toml").read_text()
    assert not [p for p in root.rglob(f"*{ejecting.STAGED}")], "a staged file was left behind"
    again = eject(root)
    assert (again.returncode, again.stderr.count("\n")) == (2, 1) and again.stderr.startswith("error: --project: ")


def test_a_file_python_could_not_read_refuses_the_eject_in_one_line_and_changes_nothing(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    (root / "tests" / "test_broken.py").write_bytes(b"import lightning_gpu_engine\n# caf\xe9 without a coding line\n")
    before = snapshot(root)
    refused = eject(root)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("error: --project: ") and refused.stderr.count("\n") == 1, refused.stderr
    assert "test_broken.py" in refused.stderr and "Traceback" not in refused.stderr
    assert snapshot(root) == before


def test_a_failure_half_way_puts_every_byte_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path / "p")
    before = snapshot(root)
    replace, calls = os.replace, []

    def fails_on_the_third(src: str | Path, dst: str | Path) -> None:  # the engine and one file are in place by then
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        replace(src, dst)

    monkeypatch.setattr(ejecting.os, "replace", fails_on_the_third)
    with pytest.raises(OSError, match="No space left"):
        ejecting.eject(root)
    assert len(calls) == 3
    assert snapshot(root) == before
