"""A generated project records its answers and template commit, so `cruft update` brings template changes to it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import BIN, TEMPLATE, run

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t"}
GIT_ENV |= {"GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> None:
    result = run("git", "-c", "init.defaultBranch=main", *args, cwd=repo)
    assert result.returncode == 0, result.stderr


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def cruft(project: Path, *args: str) -> tuple[int, str]:
    result = run(BIN / "cruft", *args, cwd=project)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("task", "name"), [("image-classification", "Image Classifier"), ("language-model", "Language Model")]
)
def test_cruft_update_brings_a_template_change_and_keeps_the_users_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str, name: str
) -> None:
    """Each task's bake: the post-gen hook that keeps one task's files runs again inside `cruft update`."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    template = tmp_path / "template"
    template.mkdir()
    shutil.copy(TEMPLATE / "cookiecutter.json", template)
    ignore = shutil.ignore_patterns("__pycache__", ".*_cache", "outputs")
    for folder in ("hooks", "engine", "{{cookiecutter.project_slug}}"):  # engine/: the wheel the post-gen hook builds
        shutil.copytree(TEMPLATE / folder, template / folder, ignore=ignore)
    git(template, "init", "-q")
    commit_all(template, "template v1")

    code, out = cruft(
        tmp_path,
        "create",
        "--no-input",
        "--output-dir",
        "projects",
        str(template),
        "--extra-context",
        json.dumps({"logger": "csv", "task": task}),
    )
    assert code == 0, out
    project = tmp_path / "projects" / name.lower().replace(" ", "-")
    state = json.loads((project / ".cruft.json").read_text())
    assert state["context"]["cookiecutter"]["logger"] == "csv"
    git(project, "init", "-q")
    commit_all(project, "generated")
    quickstart = project / "configs" / "cpu-quickstart.yaml"
    quickstart.write_text(quickstart.read_text() + "seed: 7  # the user's own edit\n")
    commit_all(project, "user edit")

    readme = template / "{{cookiecutter.project_slug}}" / "README.md"
    readme.write_text(readme.read_text() + "\nA template improvement for {{ cookiecutter.project_name }}.\n")
    commit_all(template, "template v2")

    code, out = cruft(project, "check")
    assert code != 0 and "out of date" in out.lower(), out
    code, out = cruft(project, "update", "--skip-apply-ask")
    assert code == 0, out
    assert f"A template improvement for {name}." in (project / "README.md").read_text()
    assert not (project / "_variants").exists()
    commands = project / "src" / name.lower().replace(" ", "_") / "commands"  # what train.py runs
    assert f"tasks.{task.replace('-', '_')} import TASK" in (commands / "train.py").read_text()
    assert quickstart.read_text().endswith("seed: 7  # the user's own edit\n")
    assert json.loads((project / ".cruft.json").read_text())["context"]["cookiecutter"]["logger"] == "csv"
    code, out = cruft(project, "check")
    assert code == 0, out
