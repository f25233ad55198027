"""scripts/gpu_evidence.sh runs on GPU images without cookiecutter when given a baked project, and never records a
result where no GPU ran it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import TEMPLATE, bake, run

SCRIPT = TEMPLATE / "scripts" / "gpu_evidence.sh"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bake(tmp_path_factory.mktemp("evidence"))


@pytest.fixture
def python_without_cookiecutter(tmp_path: Path) -> Path:
    """An interpreter wrapper whose environment cannot import cookiecutter, as on a GPU image."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "cookiecutter.py").write_text("raise ImportError('cookiecutter is not installed here')\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{blocked}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def evidence_files() -> set[Path]:
    return {p for folder in ("gpu-evidence", "benchmarks") for p in (TEMPLATE / "docs" / folder).glob("*.*")}


def test_without_cookiecutter_it_asks_for_a_baked_project(python_without_cookiecutter: Path) -> None:
    before = evidence_files()
    result = run("bash", SCRIPT, cwd=TEMPLATE, env={"PYTHON": str(python_without_cookiecutter)})
    assert result.returncode == 2
    expected = f"error: {python_without_cookiecutter} lacks one of cookiecutter, lightning, pytest, torch; "
    expected += "install them, or pass an already-baked PROJECT_DIR"
    assert result.stderr.strip().splitlines() == [expected]
    assert evidence_files() == before


def test_a_baked_project_needs_no_cookiecutter_and_nothing_is_recorded_without_a_gpu(
    project: Path, python_without_cookiecutter: Path
) -> None:
    before = evidence_files()
    env = {"PYTHON": str(python_without_cookiecutter), "CUDA_VISIBLE_DEVICES": ""}
    result = run("bash", SCRIPT, project, cwd=TEMPLATE, env=env)
    assert result.returncode == 2
    # Past the import check (which no longer asks for cookiecutter), stopped only by the missing GPU.
    assert result.stderr.strip().splitlines() == [
        "error: torch sees no CUDA GPU here; this script records GPU results only where a GPU ran them"
    ]
    assert evidence_files() == before


def test_a_folder_that_is_not_a_baked_project_is_refused_in_one_line(tmp_path: Path) -> None:
    result = run("bash", SCRIPT, tmp_path, cwd=TEMPLATE)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: PROJECT_DIR: {tmp_path} is not a baked project (no train.py and src/ there)"
    ]
