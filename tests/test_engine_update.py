"""A repo baked before the engine was a package moves over by `cruft update`: the copied engine goes, the dependency
comes, the repo ends as a fresh bake would be, and a team's own task file in it keeps training."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import BIN, TEMPLATE, pip, run, venv
from test_cruft import GIT_ENV, commit_all, git
from test_engine_package import WHEEL

# The last template commit whose bakes carried the engine in src/<package>/engine/
BEFORE = "04a621e"
TINY = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--num-workers=0", "--logger=csv"]
TINY += ["--batch-size=8", "--samples=32", "--max-steps=2"]


def template_at(commit: str | None, folder: Path) -> None:
    """The template's files at `commit` (None: as they are now) in `folder`, committed there as a git repo."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in [p for p in folder.iterdir() if p.name != ".git"]:
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    parts = ["cookiecutter.json", "hooks", "{{cookiecutter.project_slug}}", "engine"]
    if commit is None:
        ignore = shutil.ignore_patterns("__pycache__", ".*_cache", "outputs")
        for part in parts:
            source = TEMPLATE / part
            shutil.copytree(source, folder / part, ignore=ignore) if source.is_dir() else shutil.copy(source, folder)
    else:
        archive = subprocess.run(
            ["git", "archive", commit, *parts[:3]], cwd=TEMPLATE, capture_output=True, check=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as files:
            files.extractall(folder, filter="data")
    if not (folder / ".git").exists():
        git(folder, "init", "-q")
    commit_all(folder, f"template {commit or 'now'}")


def readme_task(project: Path) -> str:
    section = (project / "README.md").read_text().split("\n## Bring your own task\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)[0]


# guarded (.ci/guarded.toml): two bakes, a cruft update, an install and a tiny run each. Not measured yet: an estimate
@pytest.mark.minutes(1.5)
@pytest.mark.parametrize(
    ("task", "slug"), [("image-classification", "image-classifier"), ("language-model", "language-model")]
)
def test_cruft_update_replaces_the_copied_engine_by_the_package_and_the_teams_task_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str, slug: str
) -> None:
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    template = tmp_path / "template"
    template_at(BEFORE, template)
    answers = json.dumps({"task": task})
    created = run(
        BIN / "cruft",
        "create",
        "--no-input",
        "--output-dir",
        "projects",
        template,
        "--extra-context",
        answers,
        cwd=tmp_path,
    )
    assert created.returncode == 0, created.stderr
    project = tmp_path / "projects" / slug
    package = project / "src" / slug.replace("-", "_")
    assert (package / "engine" / "run.py").is_file(), "the old layout"
    (project / "my_task.py").write_text(readme_task(project))  # a team's own task, written from the old README
    git(project, "init", "-q")
    commit_all(project, "generated, and the team's task")

    template_at(None, template)
    updated = run(BIN / "cruft", "update", "--skip-apply-ask", cwd=project, timeout=600)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert not list(package.glob("engine/**/*.py")), "the copied engine is gone"
    assert (project / "wheels" / WHEEL).is_file() and "lightning-gpu-engine @" in (
        project / "pyproject.toml"
    ).read_text()
    assert not list(project.rglob("*.rej")), "every change applied"

    fresh = run(
        BIN / "cruft",
        "create",
        "--no-input",
        "--output-dir",
        "fresh",
        template,
        "--extra-context",
        answers,
        cwd=tmp_path,
    )
    assert fresh.returncode == 0, fresh.stderr
    new = tmp_path / "fresh" / slug
    theirs = {p.relative_to(new) for p in new.rglob("*") if p.is_file()} - {Path(".cruft.json")}
    ours = {p.relative_to(project) for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert ours - theirs == {Path(".cruft.json"), Path("my_task.py")}, "the updated repo has files a bake lacks"
    assert theirs <= ours
    differ = [str(p) for p in theirs if (new / p).read_bytes() != (project / p).read_bytes()]
    assert differ == [], "the updated repo differs from a fresh bake, whose suite CI runs"

    python = venv(tmp_path / "venv")
    pip(python, "install", "-q", "--no-index", "--no-build-isolation", "-e", project, cwd=tmp_path)
    trained = run(python, "my_task.py", *TINY, f"--output-dir={tmp_path / 'run'}", cwd=project, timeout=600)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    assert list((tmp_path / "run").rglob("last.ckpt")), trained.stdout[-2000:]
