"""Every value of every choice, and every pair of values across choices, bakes into a clean, typed project."""

from __future__ import annotations

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


# Package names that sort before and after `train` and `conftest`, so import order is checked for any name, and the
# longest the pre-gen hook allows (64 characters), so the project's lint is checked for its longest import lines.
NAMES = [
    "Image Classifier",
    "Aardvark Vision",
    "Zoo Net",
    "Acme Research Vision Platform For Standardised Training Across T",
]
MATRIX = [{"project_name": NAMES[i % len(NAMES)], **row} for i, row in enumerate(pairwise(CHOICES))]
# mypy's verdict hangs on the task and the Python version alone: every other answer fills only a literal in a Python
# file (a string, or None/False for a field typed `bool | None`), as the test below holds the template to. So mypy
# checks one bake of each pair, the first in MATRIX, not all of them (a quarter of CI's time went to it).
TYPED = [
    row
    for i, row in enumerate(MATRIX)
    if all((r["task"], r["python_version"]) != (row["task"], row["python_version"]) for r in MATRIX[:i])
]
# An answer as a literal: a string (or a docstring), or the None/False of a field whose default the answer turns off
LITERAL_ANSWER = re.compile(
    r'"\{\{ cookiecutter\.\w+ \}\}"|\{\{ "None" if cookiecutter\.\w+ == "yes" else "False" \}\}'
)
ENGINE_WHEEL = f"lightning_gpu_engine-{tomllib.loads((TEMPLATE / 'engine' / 'pyproject.toml').read_text())['project']['version']}-py3-none-any.whl"
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


TASKS = "{{cookiecutter.project_slug}}/src/{{cookiecutter.package_name}}/tasks"


def test_every_task_choice_is_a_task_folder_which_the_hooks_folder_rule_reads() -> None:
    folders = {p.name for p in (TEMPLATE / TASKS).iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {task.replace("-", "_") for task in CHOICES["task"]}


BOT_CONFIGS = {"renovate": "renovate.json", "dependabot": ".github/dependabot.yml"}


def expected_files(task: str, bot: str, bundled: bool) -> set[str]:
    """The template's files as the post-gen hook's folder rule leaves them for `task`: every other task's folders
    (src/<package>/tasks/<name>/, tests/<name>/) left out, and _variants/<task>/ copied over the root; names unrendered.
    Only the chosen dependency bot's config stays, and the engine's wheel where the project carries it."""
    source = TEMPLATE / "{{cookiecutter.project_slug}}"
    others = [t.replace("-", "_") for t in CHOICES["task"] if t != task]
    left_out = [f"src/{{{{cookiecutter.package_name}}}}/tasks/{o}/" for o in others] + [f"tests/{o}/" for o in others]
    variants = f"_variants/{task}/"
    return {
        f.removeprefix(variants)
        for f in files(source)
        if not f.startswith(tuple(left_out)) and (not f.startswith("_variants/") or f.startswith(variants))
    } - {config for other, config in BOT_CONFIGS.items() if other != bot} | (
        {f"wheels/{ENGINE_WHEEL}"} if bundled else set()
    )


def test_answers_but_the_task_and_python_version_fill_only_literals_in_python_files() -> None:
    """What lets mypy check one bake per task and Python version (TYPED)."""
    typed_keys = ("package_name", "task", "python_version")  # names, and TYPED's own keys
    for path in (TEMPLATE / "{{cookiecutter.project_slug}}").rglob("*.py"):
        rest = LITERAL_ANSWER.sub("", path.read_text())
        others = set(re.findall(r"cookiecutter\.(\w+)", rest)) - set(typed_keys)
        assert not others, f"{path.relative_to(TEMPLATE)}: {sorted(others)} change more than a literal; add to TYPED"


def test_bake_has_exactly_the_template_files_with_names_rendered(baked: tuple[Row, Path]) -> None:
    # Every choice but the task is the default of a runtime flag, so bakes of one task have the same files; only their
    # names are rendered. The other tasks' folders are left out, and the task's _variants/ replace shared files.
    answers, project = baked
    package = answers["project_name"].lower().replace(" ", "_")
    left = expected_files(answers["task"], answers["dependency_bot"], answers["engine_source"] == "bundled")
    expected = {f.replace("{{cookiecutter.package_name}}", package) for f in left}
    assert files(project) == expected
    assert "_variants" not in {p.name for p in project.iterdir()}
    for extra in (".pre-commit-config.yaml", ".github/workflows/ci.yml", ".github/workflows/gpu.yml", "Dockerfile"):
        assert extra in expected
    assert not [f for f in expected if "__pycache__" in f or f.endswith(".pyc")]
    # The engine is a dependency, not a copy: no engine module or engine test is in the bake; its task's tests are
    own = answers["task"].replace("-", "_")
    assert not [f for f in files(project) if f.startswith((f"src/{package}/engine/", "tests/engine/"))]
    assert {f.split("/")[1] for f in files(project) if f.startswith("tests/") and f.count("/") > 1} == {own}


def test_no_jinja_is_left_in_any_file(baked: tuple[Row, Path]) -> None:
    _, project = baked
    texts = {
        f: (project / f).read_text() for f in files(project) if not f.endswith(".whl")
    }  # the engine's wheel: bytes
    leftovers = [f for f, text in texts.items() if JINJA_LEFTOVER.search(f + text)]
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
def test_a_tracker_is_a_dependency_when_chosen_and_a_choice_of_logger_in_every_bake(
    baked: tuple[Row, Path], tracker: str
) -> None:
    answers, project = baked
    dependencies = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith(f"{tracker}>=") for d in dependencies) is (answers["logger"] == tracker)
    loggers = TEMPLATE / "engine" / "src" / "lightning_gpu_engine" / "trainer" / "loggers.py"
    assert f'cfg.logger == "{tracker}"' in loggers.read_text(), "selectable by --logger whatever the answer"


def test_ruff_lint_and_format_are_clean(baked: tuple[Row, Path]) -> None:
    _, project = baked
    for check in (["check"], ["format", "--check"]):
        result = run(BIN / "ruff", *check, "--no-cache", ".", cwd=project)
        assert result.returncode == 0, result.stdout + result.stderr


# 0.39-0.91 CPU-minutes measured: the first bake of a Python version analyses torch and Lightning, the rest reuse it
@pytest.mark.minutes(1)
@pytest.mark.parametrize("answers", TYPED, ids=lambda row: f"{row['task']}-py{row['python_version']}")
def test_mypy_is_clean(answers: Row, mypy_cache: Path, engine_python: Path, tmp_path: Path) -> None:
    project = bake(tmp_path, **answers)
    # A file cache, not sqlite: xdist workers share it, and sqlite can report "database is locked" under that.
    sources = ("src", "tests", *sorted(p.name for p in project.glob("*.py")))  # and every entry point
    # the engine as a bake installs it, typed (py.typed): what the project's code is checked against
    options = ["--no-sqlite-cache", "--cache-dir", mypy_cache, "--python-executable", engine_python]
    result = run(BIN / "mypy", *options, *sources, cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
