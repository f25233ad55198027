"""What a team expects in a new repo: pre-commit, CPU and GPU workflows, a Dockerfile, .gitignore, uv beside pip."""

from __future__ import annotations

import re
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import BIN, bake, run


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bake(tmp_path_factory.mktemp("extras"), python_version="3.12")


def workflow(project: Path, name: str) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """(triggers, the one job, its steps); YAML 1.1 reads the key `on` as True."""
    data = yaml.safe_load((project / ".github" / "workflows" / name).read_text())
    (job,) = data["jobs"].values()
    return data[True], job, job["steps"]


def test_pre_commit_fixes_lint_first_then_formats(project: Path) -> None:
    (repo,) = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())["repos"]
    assert repo["repo"].endswith("/ruff-pre-commit")
    assert [(h["id"], h.get("args", [])) for h in repo["hooks"]] == [("ruff-check", ["--fix"]), ("ruff-format", [])]


def test_ci_installs_with_uv_within_the_cooldown_then_runs_lint_types_and_tests(project: Path) -> None:
    triggers, job, steps = workflow(project, "ci.yml")
    assert {"push", "pull_request"} <= set(triggers)
    setup = next(s for s in steps if s.get("uses", "").startswith("astral-sh/setup-uv"))
    assert setup["with"]["python-version"] == "3.12" and setup["with"]["enable-cache"] is True
    assert re.fullmatch(r"\d+\.\d+\.\d+", setup["with"]["version"]), "uv pinned, not the newest"
    commands = " | ".join(s.get("run", "") for s in steps)
    assert "if [ -f uv.lock ]; then uv sync --locked" in commands, "exactly the committed lock, once there is one"
    assert "pip install" not in commands, "every install goes through pyproject.toml's cooldown"
    for command in ("ruff check", "ruff format --check", "mypy"):
        assert command in commands
    assert "pip-audit --disable-pip --require-hashes" in commands, "a dependency audit of what was installed"
    assert "python -m pytest |" in commands + " |" and "python -m pytest -m slow" in commands
    assert job["runs-on"] == "ubuntu-latest"


def test_every_dependency_bound_has_its_reason_and_lightning_is_past_its_checkpoint_hole(project: Path) -> None:
    lines = (project / "pyproject.toml").read_text().splitlines()
    meta = tomllib.loads("\n".join(lines))["project"]
    requirements = [*meta["dependencies"], *meta["optional-dependencies"]["export"]]
    engine = [r for r in requirements if r.startswith("lightning-gpu-engine")]
    assert len(engine) == 1 and re.search(r" @ \{root:uri\}/wheels/\S+\.whl#sha256=[0-9a-f]{64}$", engine[0]), (
        "the engine: the bundled wheel, by a direct reference checked by its hash (no index can stand in for it)"
    )
    for requirement in requirements:
        if requirement in engine:
            continue
        (index,) = [i for i, line in enumerate(lines) if line.strip() == f'"{requirement}",']
        start = index
        while lines[start - 1].strip().startswith("#"):  # the comment block right above the requirement
            start -= 1
        reason = " ".join(lines[start:index])
        bound = re.search(r">=([\w.]+)", requirement)
        assert bound, f"{requirement}: every dependency has a lower bound"
        assert reason, f"{requirement}: no reason given"
        assert f"# {bound.group(1)}:" in reason, f"{requirement}: the reason starts with the version it explains"
    assert "lightning>=2.6.6" in requirements  # CVE-2026-58659: older releases run code named in a checkpoint
    torchcodec = next(r for r in requirements if r.startswith("torchcodec"))
    assert ";" in torchcodec, "TorchCodec only where it has wheels; elsewhere the CPU decoder takes over"


def test_gpu_workflow_runs_on_a_self_hosted_gpu_runner_and_never_for_pull_requests(project: Path) -> None:
    triggers, job, steps = workflow(project, "gpu.yml")
    assert set(triggers) == {"push", "workflow_dispatch"}, "pull_request(_target) would let forks run code on it"
    assert triggers["push"] == {"branches": ["main"]}
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    commands = " | ".join(s.get("run", "") for s in steps)
    assert "docker build" in commands and "--gpus all" in commands and '-m "gpu or multigpu"' in commands


def test_dockerfile_builds_on_nvidia_pytorch_and_never_reinstalls_its_torch(project: Path) -> None:
    text = (project / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE=nvcr\.io/nvidia/pytorch:\d\d\.\d\d-py3$", text, re.MULTILINE)
    assert re.search(r"^FROM \$\{BASE\}$", text, re.MULTILINE)
    installs = [i for i in re.findall(r"pip install[^\n]*", text) if not re.search(r"pip==[\d.]+$", i)]
    assert installs and all("-c /etc/torch-constraints.txt" in i or "--no-deps" in i for i in installs)
    assert re.search(r"^ENV PIP_UPLOADED_PRIOR_TO=P7D$", text, re.MULTILINE), "pip's side of the cooldown"
    assert "grep -E '^(torch|torchvision)=='" in text
    assert not [i for i in installs if {"torch", "torchvision"} & set(i.split())]


def test_gitignore_hides_runs_and_data_but_no_generated_file(project: Path, tmp_path: Path) -> None:
    shutil.copytree(project, tmp_path / "repo")
    repo = tmp_path / "repo"
    for junk in (
        "outputs/run/last.ckpt",
        "data/cifar-10-batches-py/x",
        "lightning_logs/v0/x",
        "src/x/__pycache__/a.pyc",
    ):
        (repo / junk).parent.mkdir(parents=True, exist_ok=True)
        (repo / junk).write_text("x")
    assert run("git", "init", "-q", cwd=repo).returncode == 0
    tracked = run("git", "ls-files", "--others", "--exclude-standard", cwd=repo).stdout.split()
    assert sorted(tracked) == sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())


@pytest.mark.skipif(not (BIN / "uv").exists(), reason="uv is not installed beside this Python")
def test_uv_sync_would_install_the_project_and_its_dev_group(tmp_path: Path) -> None:
    """Resolves against the package index (network) for this Python, without downloading or installing wheels."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    repo = bake(tmp_path, python_version=here, logger="wandb")
    uv: list[str | Path] = [BIN / "uv", "--cache-dir", tmp_path / "uv-cache", "--no-python-downloads"]
    result = run(*uv, "lock", "--python", sys.executable, cwd=repo, timeout=300)
    assert result.returncode == 0, result.stderr
    result = run(*uv, "sync", "--dry-run", "--python", sys.executable, cwd=repo, timeout=300)
    assert result.returncode == 0, result.stderr
    for package in ("image-classifier @ file://", "torch==", "lightning==", "wandb==", "pytest==", "ruff==", "mypy=="):
        assert f" + {package}" in result.stderr, result.stderr
