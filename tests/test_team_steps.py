"""What a team does to its new repo keeps it whole: eject the engine and commit (git keeps every file it copied),
install as the README says and run `pytest` (every module the tests import is declared there), save the guide's task
beside train.py (the project's own tests still pass)."""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import ENGINE, bake, run

TASKS = ["image-classification", "language-model"]
# The calls that import a module named by a string: a test that skips without it hides a missing install
IMPORTING_CALLS = {"importorskip", "find_spec", "import_module"}


@pytest.mark.parametrize("task", TASKS)
def test_after_eject_git_keeps_every_file_and_still_hides_runs_data_and_builds(
    task: str, engine_python: Path, tmp_path: Path
) -> None:
    """The .gitignore once ignored build/ and data/ at any depth: the ejected engine's data/ (and its build/, since
    renamed trainer/) too."""
    project = bake(tmp_path, task=task)
    ejected = run(engine_python, "-m", "lightning_gpu_engine", "eject", cwd=project)
    assert ejected.returncode == 0, ejected.stderr
    copied = [p for p in (project / "src").rglob("*.py") if "engine" in p.relative_to(project / "src").parts[1:2]]
    assert "data" in {p.parent.name for p in copied}, "the engine's folder that a loose pattern hides"
    junk = ["build/lib/x.py", "data/train/x.png", "dist/x.whl", "outputs/run/last.ckpt", "lightning_logs/v0/x"]
    for path in junk:
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text("x")
    assert run("git", "init", "-q", cwd=project).returncode == 0
    ignored = run("git", "ls-files", "--others", "--ignored", "--exclude-standard", cwd=project).stdout.split()
    assert sorted(ignored) == sorted(junk), "git ignores exactly the runs, the data and the builds"


def requirement_names(requirements: list[str], meta: dict[str, object]) -> set[str]:
    """The distributions a list of requirements installs, by normalised name; a reference to the project's own extras
    (`name[export]`) brings those extras' requirements."""
    names = set()
    for requirement in requirements:
        name = normalised(re.match(r"[A-Za-z0-9._-]+", requirement).group(0))  # type: ignore[union-attr]
        extras = re.match(r"[A-Za-z0-9._-]+\s*\[([^\]]*)\]", requirement)
        if name == normalised(str(meta["name"])) and extras:
            optional: dict[str, list[str]] = meta["optional-dependencies"]  # type: ignore[assignment]
            chosen = [r for extra in extras.group(1).split(",") for r in optional[extra.strip()]]
            names |= requirement_names(chosen, meta)
        else:
            names.add(name)
    return names


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(project: Path, package: str) -> dict[str, str]:
    """Each third-party top-level module that the project's src/, tests/ and root scripts import, with the first file
    that does: the standard library and the project's own modules (its package, scripts and test helpers) left out."""
    files = sorted([*(project / "src").rglob("*.py"), *(project / "tests").rglob("*.py"), *project.glob("*.py")])
    own = {package, "tests"} | {p.stem for p in files if "src" not in p.relative_to(project).parts}
    own |= {p.name for p in (project / "tests").rglob("*") if p.is_dir()}
    found: dict[str, str] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in IMPORTING_CALLS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names = [node.args[0].value]
            else:
                continue
            for top in (name.split(".")[0] for name in names):
                if top not in sys.stdlib_module_names and top not in own:
                    found.setdefault(top, str(path.relative_to(project)))
    return found


@pytest.mark.parametrize("task", TASKS)
def test_every_module_a_bakes_code_and_tests_import_is_declared_in_what_its_readme_installs(
    task: str, engine_python: Path, tmp_path: Path
) -> None:
    """The README's `pip install -e ".[dev]"` (or `uv sync`, the dev group), then `pytest`: a fresh install once
    lacked onnxruntime, which only the export extra held. deptry's check: a module imported is a distribution
    declared, not one that another happens to bring (Pillow came with torchvision)."""
    project = bake(tmp_path, task=task)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    meta = pyproject["project"]
    modules = imported_modules(project, meta["name"].replace("-", "_"))
    assert {"torch", "lightning", "lightning_gpu_engine", "pytest"} <= set(modules), "the imports were read"
    # which distribution provides each module, in the environment a bake's suite runs in (the engine from its wheel)
    mapping = run(
        engine_python,
        "-c",
        "import importlib.metadata as m, json; print(json.dumps(m.packages_distributions()))",
        cwd=tmp_path,
    )
    provided: dict[str, list[str]] = json.loads(mapping.stdout)
    installs = {
        'pip install -e ".[dev]"': [*meta["dependencies"], *meta["optional-dependencies"]["dev"]],
        "uv sync": [*meta["dependencies"], *pyproject["dependency-groups"]["dev"]],
    }
    for command, requirements in installs.items():
        declared = requirement_names(requirements, meta)
        missing = [
            f"{module} (imported by {where}, from {', '.join(provided.get(module, ['no installed distribution']))})"
            for module, where in sorted(modules.items())
            if not declared & {normalised(d) for d in provided.get(module, [])}
        ]
        assert missing == [], f"{command} does not install: " + "; ".join(missing)


def test_the_guides_task_saved_beside_train_py_leaves_the_projects_tests_passing(
    engine_python: Path, tmp_path: Path
) -> None:
    """The guide says to save its example as my_task.py beside train.py; the project's test of its entry points once
    took it for one of them, and failed: "lightning was imported before the answer"."""
    project = bake(tmp_path)
    guide = (ENGINE / "src" / "lightning_gpu_engine" / "docs" / "bring-your-own-task.md").read_text()
    (project / "my_task.py").write_text(re.findall(r"```python\n(.*?)```", guide, flags=re.DOTALL)[0])
    result = run(
        engine_python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/test_engine_use.py",
        cwd=project,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
