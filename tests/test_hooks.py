"""Bad answers are refused before anything is written: one line naming the answer, a failed bake, an empty folder."""

from __future__ import annotations

import ast
import json
import re
import tomllib
from pathlib import Path

import pytest
from conftest import CHOICES, TEMPLATE, bake
from cookiecutter.exceptions import FailedHookException
from cookiecutter.main import cookiecutter

BAD_ANSWERS = [
    ({"project_slug": "my project"}, "project_slug: 'my project' is not a valid distribution name"),
    ({"project_slug": "-dash-first"}, "project_slug: '-dash-first' is not a valid distribution name"),
    ({"project_slug": "dot-last."}, "project_slug: 'dot-last.' is not a valid distribution name"),
    ({"project_name": "Torch"}, "project_slug: 'torch' is the name of one of the project's dependencies"),
    ({"project_slug": "PyYAML", "package_name": "cfg"}, "project_slug: 'PyYAML' is the name of one of the project's"),
    ({"project_slug": "wandb", "package_name": "w", "logger": "wandb"}, "project_slug: 'wandb' is the name of one"),
    ({"package_name": "2fast"}, "package_name: '2fast' is not a plain identifier"),
    ({"package_name": "my-package"}, "package_name: 'my-package' is not a plain identifier"),
    ({"package_name": "café"}, "package_name: 'café' is not a plain identifier"),
    ({"project_name": "Class"}, "package_name: 'class' is a Python keyword"),
    ({"package_name": "p" * 65}, f"package_name: '{'p' * 65}' is 65 characters; give one of at most 64"),
    ({"package_name": "json"}, "package_name: 'json' would shadow a module the project needs"),
    ({"package_name": "test"}, "package_name: 'test' would shadow a module the project needs"),
    ({"package_name": "typing"}, "package_name: 'typing' would shadow a module the project needs"),
    ({"package_name": "torchvision"}, "package_name: 'torchvision' would shadow a module the project needs"),
    ({"package_name": "yaml"}, "package_name: 'yaml' would shadow a module the project needs"),
    ({"package_name": "train"}, "package_name: 'train' would shadow a module the project needs"),
    ({"package_name": "mlflow", "logger": "mlflow"}, "package_name: 'mlflow' would shadow a module the project needs"),
    ({"description": 'A "quoted" word'}, "description: 'A \"quoted\" word' goes into pyproject.toml"),
    ({"author": "Ann\\Bob"}, "author: 'Ann\\\\Bob' goes into pyproject.toml"),
    ({"cooldown_days": "7 days"}, "cooldown_days: '7 days' is not a whole number of days from 0 (no cooldown) to 90"),
    ({"cooldown_days": "-1"}, "cooldown_days: '-1' is not a whole number of days"),
    ({"cooldown_days": "91"}, "cooldown_days: '91' is not a whole number of days"),  # Dependabot's limit is 90
    ({"cooldown_days": "07"}, "cooldown_days: '07' is not a whole number of days"),  # YAML would read 010 as 8
]
# Prompts and --no-input overrides only offer cookiecutter.json's choices; a replay file is taken as written.
REPLAYED = [
    ({"python_version": "3.9"}, "python_version: '3.9' is not supported; choose one of 3.10, 3.11, 3.12, 3.13"),
    ({"task": "segmentation"}, "task: 'segmentation' is not a task this template ships; choose one of image-classi"),
    ({"dependency_bot": "snyk"}, "dependency_bot: 'snyk' is not offered; choose one of renovate, dependabot"),
]


def refusal(output_dir: Path, capfd: pytest.CaptureFixture[str], **answers: str) -> str:
    """Bake, expect the pre-gen hook to refuse, and return its one error line."""
    with pytest.raises(FailedHookException):
        bake(output_dir, **answers)
    errors = [line for line in capfd.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, errors
    assert list(output_dir.iterdir()) == [], "a refused bake must leave nothing behind"
    return errors[0]


@pytest.mark.parametrize(("answers", "message"), BAD_ANSWERS, ids=[str(a) for a, _ in BAD_ANSWERS])
def test_bad_answer_is_refused_with_one_line_and_no_folder(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], answers: dict[str, str], message: str
) -> None:
    assert refusal(tmp_path, capfd, **answers).startswith(f"error: {message}")


@pytest.mark.parametrize(("replayed", "message"), REPLAYED, ids=[str(a) for a, _ in REPLAYED])
def test_an_unsupported_choice_from_a_replay_file_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], replayed: dict[str, str], message: str
) -> None:
    defaults = json.loads((TEMPLATE / "cookiecutter.json").read_text())
    answers = {k: v[0] if isinstance(v, list) else v for k, v in defaults.items()}
    answers |= {"project_slug": "image-classifier", "package_name": "image_classifier", **replayed}
    replay = tmp_path / "replay" / "answers.json"
    replay.parent.mkdir()
    replay.write_text(json.dumps({"cookiecutter": answers}))
    output = tmp_path / "out"
    output.mkdir()
    with pytest.raises(FailedHookException):
        cookiecutter(str(TEMPLATE), replay=str(replay), output_dir=str(output))
    assert f"error: {message}" in capfd.readouterr().err
    assert list(output.iterdir()) == []


def test_every_offered_python_version_is_supported(tmp_path: Path) -> None:
    for version in CHOICES["python_version"]:
        assert bake(tmp_path / version, python_version=version).is_dir()


@pytest.mark.parametrize(
    "answers",
    [
        {"project_slug": "Vision.Tools_2", "package_name": "vision_tools_2"},
        {"package_name": "wandb", "logger": "csv"},  # only shadows anything when the project uses W&B
        {"project_slug": "mlflow", "package_name": "tracking", "logger": "tensorboard"},
        {"author": "Zoë O'Brien", "description": "Fast: 10x, <1 GPU-hour & more."},
    ],
    ids=["dots-and-caps", "wandb-package-without-wandb", "mlflow-slug-without-mlflow", "quotes-and-unicode"],
)
def test_unusual_but_valid_answers_bake(tmp_path: Path, answers: dict[str, str]) -> None:
    project = bake(tmp_path, **answers)
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert meta["name"] == answers.get("project_slug", "image-classifier")
    assert meta["authors"] == [{"name": answers.get("author", "Your Name")}]


def _requirement_names(pyproject: Path) -> set[str]:
    meta = tomllib.loads(pyproject.read_text())["project"]
    reqs = meta["dependencies"] + [r for group in meta["optional-dependencies"].values() for r in group]
    return {re.match(r"[A-Za-z0-9._-]+", r).group(0) for r in reqs}  # type: ignore[union-attr]


def _top_level_modules(project: Path, package: str) -> set[str]:
    """What the bake imports, and its own scripts and test helpers, which are importable by file name."""
    names = {p.stem for p in project.rglob("*.py") if "src" not in p.parts and not p.stem.startswith("test_")}
    for path in project.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names - {package}


@pytest.mark.parametrize(("logger", "task"), [("wandb", "image-classification"), ("mlflow", "language-model")])
def test_hook_knows_every_dependency_and_import_of_the_bake(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], logger: str, task: str
) -> None:
    """Guards the hook's lists against drift: whatever a bake of either task depends on or imports is refused."""
    project = bake(tmp_path / "ok", logger=logger, task=task)
    known = [*_requirement_names(project / "pyproject.toml"), logger]
    missed = []
    for i, name in enumerate(sorted(set(known))):
        line = refusal(tmp_path / f"dist{i}", capfd, project_slug=name, package_name="pkg", logger=logger)
        if "dependencies" not in line:
            missed.append(f"project_slug={name}: {line}")
    for i, module in enumerate(sorted(_top_level_modules(project, project.name.replace("-", "_")) | {logger})):
        line = refusal(tmp_path / f"mod{i}", capfd, package_name=module, logger=logger)
        if "would shadow" not in line:
            missed.append(f"package_name={module}: {line}")
    assert not missed, "\n".join(missed)
