"""Every value of every choice, and every pair of values across choices, bakes into a clean, typed project."""

from __future__ import annotations

import ast
import itertools
import re
import tomllib
from pathlib import Path

import pytest
from conftest import BIN, CHOICES, TEMPLATE, bake, run

Row = dict[str, str]


def pairs(row: Row) -> set[tuple[tuple[str, str], tuple[str, str]]]:
    return set(itertools.combinations(row.items(), 2))


def pairwise(choices: dict[str, list[str]]) -> list[Row]:
    """Greedy all-pairs: each new row is the candidate, seeded by one uncovered pair, that covers most of the rest."""
    keys = list(choices)
    todo = set().union(*(pairs(dict(zip(keys, values))) for values in itertools.product(*choices.values())))
    rows: list[Row] = []
    while todo:
        candidates = []
        for (a, x), (b, y) in sorted(todo):
            row = {a: x, b: y}
            for key in keys:
                if key not in row:
                    row[key] = max(choices[key], key=lambda v: len(pairs({**row, key: v}) & todo))
            candidates.append({key: row[key] for key in keys})
        rows.append(max(candidates, key=lambda r: len(pairs(r) & todo)))
        todo -= pairs(rows[-1])
    return rows


# Package names that sort before and after `train` and `conftest`, so import order is checked for any name.
NAMES = ["Image Classifier", "Aardvark Vision", "Zoo Net"]
MATRIX = [{"project_name": NAMES[i % len(NAMES)], **row} for i, row in enumerate(pairwise(CHOICES))]
JINJA_LEFTOVER = re.compile(r"(?<!\$)\{\{|\{%")  # GitHub's ${{ expr }} is meant to stay


def test_matrix_covers_every_pair_of_choices() -> None:
    for (a, values_a), (b, values_b) in itertools.combinations(CHOICES.items(), 2):
        for x, y in itertools.product(values_a, values_b):
            assert any(row[a] == x and row[b] == y for row in MATRIX), f"{a}={x} with {b}={y} is never baked"
    assert len(MATRIX) <= 24, "pairwise should stay far below the full product"


@pytest.fixture(scope="session", params=MATRIX, ids=lambda row: "-".join(row[k] for k in CHOICES))
def baked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Row, Path]:
    return request.param, bake(tmp_path_factory.mktemp("bake"), **request.param)


def files(project: Path) -> set[str]:
    return {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()}


def task_files() -> dict[str, list[str]]:
    """The post-gen hook's ONLY: the files each task alone has."""
    text = (TEMPLATE / "hooks" / "post_gen_project.py").read_text()
    found = re.search(r"^ONLY = (\{.*?^\})", text, re.DOTALL | re.MULTILINE)
    assert found, "the post-gen hook's ONLY mapping moved"
    return ast.literal_eval(found.group(1))


def test_bake_has_exactly_the_template_files_with_names_rendered(baked: tuple[Row, Path]) -> None:
    # Every choice but the task is the default of a runtime flag, so bakes of one task have the same files; only their
    # names are rendered. The other tasks' files are left out, and the task's _variants/ replace shared ones.
    answers, project = baked
    package = answers["project_name"].lower().replace(" ", "_")
    source = TEMPLATE / "{{cookiecutter.project_slug}}"
    others = [
        p.format(package="{{cookiecutter.package_name}}")
        for t, ps in task_files().items()
        if t != answers["task"]
        for p in ps
    ]
    variants = f"_variants/{answers['task']}/"
    expected = {
        f.removeprefix(variants).replace("{{cookiecutter.package_name}}", package)
        for f in files(source)
        if not any(f == p or f.startswith(p + "/") for p in others)
        and (not f.startswith("_variants/") or f.startswith(variants))
    }
    assert files(project) == expected
    assert "_variants" not in {p.name for p in project.iterdir()}
    for extra in (".pre-commit-config.yaml", ".github/workflows/ci.yml", ".github/workflows/gpu.yml", "Dockerfile"):
        assert extra in expected
    assert not [f for f in expected if "__pycache__" in f or f.endswith(".pyc")]


def test_no_jinja_is_left_in_any_file(baked: tuple[Row, Path]) -> None:
    _, project = baked
    leftovers = [f for f in files(project) if JINJA_LEFTOVER.search(f + (project / f).read_text())]
    assert not leftovers


def test_pyproject_is_valid_and_carries_the_answers(baked: tuple[Row, Path]) -> None:
    answers, project = baked
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    meta = pyproject["project"]
    assert meta["name"] == answers["project_name"].lower().replace(" ", "-")
    assert meta["requires-python"] == f">={answers['python_version']}"
    assert pyproject["tool"]["mypy"]["python_version"] == answers["python_version"]
    assert pyproject["tool"]["ruff"]["target-version"] == "py" + answers["python_version"].replace(".", "")
    # pip (`.[dev]`) and uv (`uv sync`, the dev group) install the same tools.
    assert pyproject["dependency-groups"]["dev"] == meta["optional-dependencies"]["dev"]


@pytest.mark.parametrize("tracker", ["wandb", "mlflow"])
def test_a_tracker_leaves_no_trace_unless_chosen(baked: tuple[Row, Path], tracker: str) -> None:
    answers, project = baked
    mentions = sorted(f for f in files(project) if tracker in (project / f).read_text().lower())
    if answers["logger"] != tracker:
        assert mentions == []
    else:
        dependencies = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
        assert any(d.startswith(f"{tracker}>=") for d in dependencies)
        assert any(f.endswith("trainer.py") for f in mentions)


def test_ruff_lint_and_format_are_clean(baked: tuple[Row, Path]) -> None:
    _, project = baked
    for check in (["check"], ["format", "--check"]):
        result = run(BIN / "ruff", *check, "--no-cache", ".", cwd=project)
        assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean(baked: tuple[Row, Path], mypy_cache: Path) -> None:
    _, project = baked
    # A file cache, not sqlite: xdist workers share it, and sqlite can report "database is locked" under that.
    sources = ("src", "tests", *sorted(p.name for p in project.glob("*.py")))  # and every entry point
    result = run(BIN / "mypy", "--no-sqlite-cache", "--cache-dir", mypy_cache, *sources, cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
