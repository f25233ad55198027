"""How this project uses its engine, the lightning-gpu-engine package: through its front doors alone, with this
project's answers to the template as where its runs start, and entry points that answer a typo before the engine's
heavy imports. The engine's own suite ships with the engine; this project's tests are its task's."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from conftest import MISSING_INPUTS, ROOT, run_script, without_heavy_imports
from lightning_gpu_engine import parse_run

from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK

# What code outside the engine may import from it: the package's names, and the bench's and the sweep's, for the
# project's bench.py and sweep.py (its tests may also use lightning_gpu_engine.testing and reach further in)
DOORS = ("lightning_gpu_engine", "lightning_gpu_engine.bench", "lightning_gpu_engine.sweep")


def side_doors(root: Path) -> list[str]:
    """Each import of the engine by src/, the root scripts and scripts/ that is not a name of one of its DOORS (the
    engine's own files left out, where `python -m lightning_gpu_engine eject` put them under src/)."""
    engine, listed = DOORS[0], {door: set(importlib.import_module(door).__all__) for door in DOORS}
    inside = Path(importlib.import_module(engine).__file__ or "").resolve().parent
    found = []
    for path in sorted([*(root / "src").rglob("*.py"), *root.glob("*.py"), *(root / "scripts").glob("*.py")]):
        if inside in path.resolve().parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names if a.name.startswith(f"{engine}.")]
                found += [f"{path.relative_to(root)} imports {module}" for module in modules]
            elif isinstance(node, ast.ImportFrom) and f"{node.module}.".startswith(f"{engine}."):
                door = listed.get(node.module or "", set())
                names = [a.name for a in node.names if a.name != "*" and a.name not in door]
                found += [f"{path.relative_to(root)} imports {node.module}.{name}" for name in names]
    return found


def test_the_project_imports_the_engine_through_its_front_doors_alone() -> None:
    assert side_doors(ROOT) == []


def test_the_check_sees_a_module_of_the_engine_imported_from_the_package_or_a_script(tmp_path: Path) -> None:
    (tmp_path / "src" / "team").mkdir(parents=True)
    (tmp_path / "src" / "team" / "task.py").write_text("def f():\n    from lightning_gpu_engine.trainer import trainer\n")
    (tmp_path / "train.py").write_text("from lightning_gpu_engine import Task, main\nimport lightning_gpu_engine.run\n")
    (tmp_path / "bench.py").write_text("from lightning_gpu_engine.bench import any_task, not_there\n")
    assert side_doors(tmp_path) == [
        "bench.py imports lightning_gpu_engine.bench.not_there",
        "src/team/task.py imports lightning_gpu_engine.trainer.trainer",
        "train.py imports lightning_gpu_engine.run",
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
