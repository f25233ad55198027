"""How this project uses its engine, the lightning-gpu-engine package: through its front doors alone, with this
project's answers to the template as where its runs start, and entry points that answer a typo before the engine's
heavy imports. The engine's own suite ships with the engine; this project's tests are its task's."""

from __future__ import annotations

import ast
import contextlib
import importlib
import re
from pathlib import Path

from conftest import MISSING_INPUTS, ROOT, run_script, without_heavy_imports
from lightning_gpu_engine import parse_run

from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK

# What code outside the engine may import from it: the package's names, and the bench's and the sweep's, for the
# project's bench.py and sweep.py; its tests also lightning_gpu_engine.testing's, the conformance suite and its helpers
DOORS = ("lightning_gpu_engine", "lightning_gpu_engine.bench", "lightning_gpu_engine.sweep")
TEST_DOORS = (*DOORS, "lightning_gpu_engine.testing")
ENGINE = DOORS[0]


def side_doors(root: Path) -> list[str]:
    """Each use of the engine by src/, the root scripts, scripts/ and tests/ that is not a name of one of its doors:
    an import, an attribute of a door imported whole, a dotted path in a string (mock.patch's, import_module's), or an
    import in a program a test writes out to run. The engine's own files are left out, where `python -m
    lightning_gpu_engine eject` put them under src/, and so is this file, whose examples go through side doors."""
    inside = Path(importlib.import_module(ENGINE).__file__ or "").resolve().parent
    code = [*(root / "src").rglob("*.py"), *root.glob("*.py"), *(root / "scripts").glob("*.py")]
    tests = list((root / "tests").rglob("*.py"))
    found = []
    for path in code + tests:
        if inside in path.resolve().parents or path.resolve() == Path(__file__).resolve():
            continue
        doors = {door: set(importlib.import_module(door).__all__) for door in (TEST_DOORS if path in tests else DOORS)}
        found += [f"{path.relative_to(root)} uses {name}" for name in uses(ast.parse(path.read_text()), doors)]
    return sorted(found)


def uses(tree: ast.AST, doors: dict[str, set[str]]) -> list[str]:
    """The engine's names that `tree` uses and `doors` (each door's public names) do not hold."""
    found: list[str] = []
    whole: dict[str, str] = {}  # the local name of each door imported as a module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in (a for a in node.names if f"{a.name}.".startswith(f"{ENGINE}.")):
                if alias.name in doors:
                    whole[alias.asname or ENGINE] = alias.name if alias.asname else ENGINE
                else:
                    found.append(alias.name)
        elif isinstance(node, ast.ImportFrom) and f"{node.module}.".startswith(f"{ENGINE}."):
            for alias in (a for a in node.names if a.name != "*"):
                if f"{node.module}.{alias.name}" in doors:
                    whole[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                elif alias.name not in doors.get(node.module or "", set()):
                    found.append(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ENGINE in node.value:
            module, _, name = node.value.rpartition(".")
            if re.fullmatch(rf"{ENGINE}(\.\w+)+", node.value):
                found += [] if node.value in doors or name in doors.get(module, set()) else [node.value]
            else:
                with contextlib.suppress(SyntaxError, ValueError):  # prose, or a program to run
                    found += uses(ast.parse(node.value), doors)

    def door(node: ast.expr) -> str | None:
        """The door that `node` names: a module imported whole, or a door reached as its attribute."""
        if isinstance(node, ast.Name):
            return whole.get(node.id)
        if isinstance(node, ast.Attribute) and (outer := door(node.value)) and f"{outer}.{node.attr}" in doors:
            return f"{outer}.{node.attr}"
        return None

    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr.startswith("__") or not (outer := door(node.value)):
            continue
        if node.attr not in doors[outer] and f"{outer}.{node.attr}" not in doors:
            found.append(f"{outer}.{node.attr}")
    return found


def test_the_project_uses_the_engine_through_its_front_doors_alone() -> None:
    found = side_doors(ROOT)
    assert found == [], "\n".join(found)


def test_the_check_sees_the_engine_reached_past_its_doors(tmp_path: Path) -> None:
    (tmp_path / "src" / "team").mkdir(parents=True)
    (tmp_path / "src" / "team" / "task.py").write_text("def f():\n from lightning_gpu_engine.trainer import trainer\n")
    (tmp_path / "train.py").write_text("from lightning_gpu_engine import Task\nimport lightning_gpu_engine.training\n")
    (tmp_path / "bench.py").write_text("from lightning_gpu_engine.bench import any_task, not_there\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "tool.py").write_text("from lightning_gpu_engine.testing import run_script\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(
        "from lightning_gpu_engine import Config, testing\n"
        "from lightning_gpu_engine.testing import free_port, warm_starts\n"
        "import lightning_gpu_engine.testing as t, lightning_gpu_engine.testing\n"
        "testing.popen(), testing.processes, t.run_script(), t.zygote, lightning_gpu_engine.testing.watched\n"
        "mock.patch('lightning_gpu_engine.perf.hardware.resolve'), mock.patch('lightning_gpu_engine.Config')\n"
        "SCRIPT = 'import train\\nfrom lightning_gpu_engine.trainer import trainer'\n"
    )
    assert side_doors(tmp_path) == [
        "bench.py uses lightning_gpu_engine.bench.not_there",
        "scripts/tool.py uses lightning_gpu_engine.testing.run_script",
        "src/team/task.py uses lightning_gpu_engine.trainer.trainer",
        "tests/test_a.py uses lightning_gpu_engine.perf.hardware.resolve",
        "tests/test_a.py uses lightning_gpu_engine.testing.processes",
        "tests/test_a.py uses lightning_gpu_engine.testing.warm_starts",
        "tests/test_a.py uses lightning_gpu_engine.testing.watched",
        "tests/test_a.py uses lightning_gpu_engine.testing.zygote",
        "tests/test_a.py uses lightning_gpu_engine.trainer.trainer",
        "train.py uses lightning_gpu_engine.training",
    ]


def test_the_answers_given_when_the_project_was_generated_are_where_its_runs_start() -> None:
    cfg, _ = parse_run([], TASK)
    assert cfg.precision == "{{ cookiecutter.precision }}"
    assert cfg.strategy == "{{ cookiecutter.strategy }}"
    assert cfg.logger == "{{ cookiecutter.logger }}"
    assert cfg.compile is {{ "None" if cookiecutter.compile == "yes" else "False" }}


# The project's entry points: the root scripts that are the doors of its commands (src/<package>/commands/), and
# prepare_data.py, whose options are its task's (tasks/<task>/config.py); not a team's own task saved beside them (the
# guide's my_task.py, which imports Lightning at once)
COMMANDS = ROOT / "src" / "{{ cookiecutter.package_name }}" / "commands"
ENTRY_POINTS = sorted(p.name for p in ROOT.glob("*.py") if (COMMANDS / p.name).is_file() or p.name == "prepare_data.py")
# What every task's bench.py and sweep.py refuse, beside the task's own table (MISSING_INPUTS)
EVERY_TASKS_MISSING = [
    ("train.py", ["--resume={tmp}/none.ckpt"], "--resume: no checkpoint at {tmp}/none.ckpt"),
    ("bench.py", ["--task={tmp}/none.py"], "--task: {tmp}/none.py does not exist; give "),
    ("bench.py", ["--task=no_such_task_module"], "--task: no module named 'no_such_task_module'; give "),
    ("sweep.py", ["--space={tmp}/none.yaml", "--output-dir={tmp}/s"], "--space: cannot read {tmp}/none.yaml"),
    ("sweep.py", ["--task={tmp}/none.py", "--space={tmp}/none.yaml"], "--task: {tmp}/none.py does not exist; give "),
]


def test_the_entry_points_answer_a_bad_flag_or_a_missing_file_before_importing_torch_or_lightning(
    tmp_path: Path,
) -> None:
    """A typo's one line comes at once, in a flag or in a path, from every entry point. Here torch and Lightning
    cannot be imported at all, so a script that imports either before it answers fails with a traceback (train.py
    once imported Lightning on its way out: 5 s of every one-line error; a mistyped --data-dir was told after every
    import, 5 s to 31 s; export.py's and predict.py's missing --checkpoint after 10 s and 14 s)."""
    env = without_heavy_imports(tmp_path / "shim")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert {"train.py", "bench.py", "sweep.py", "export.py", "prepare_data.py"} <= set(ENTRY_POINTS)
    runs = [(script, ["--no-such-flag"], "error: ") for script in ENTRY_POINTS]
    out = f"--output-dir={tmp_path / 'run'}"
    runs += [("train.py", ["--max-epochs=-1", out], "--max-epochs: ")]
    missing = [*MISSING_INPUTS, *EVERY_TASKS_MISSING]
    assert {script for script, *_ in missing} == set(ENTRY_POINTS), "an entry point without a missing file here"
    for script, args, said in missing:
        given = [a.format(tmp=empty) for a in args] + ([out] if script == "train.py" else [])
        runs.append((script, given, said.format(tmp=empty)))
    for script, args, said in runs:
        result = run_script(script, *args, env=env)
        assert result.returncode == 2, f"{script} {args}: {result.stderr[-2000:]}"
        assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: "), result.stderr
        assert said in result.stderr, result.stderr
    assert not (tmp_path / "run").exists() and list(empty.iterdir()) == []
    assert run_script("train.py", "--help", env=env).returncode == 0
