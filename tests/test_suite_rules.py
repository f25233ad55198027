"""Rules that keep the bakes' suites and the template's own tests from flaking on a loaded machine, read from their
source: a test waits on what a run announces, never for a length of time, and a test that starts several processes
of one run says so, so that only one such test at a time takes the cores (the engine's testing/machine_sharing.py).
The engine's suite and its test helpers are held to the same rules as the bakes' suites."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import ENGINE, bake

HERE = Path(__file__).parent
# Each fixed pause the suites may hold, by file and the line's code, with why a pause is right there
ALLOWED_SLEEPS = {
    ("src/lightning_gpu_engine/testing/processes.py", "time.sleep(every)"): "wait_until's poll of a state a run makes",
    ("tests/test_stops.py", "time.sleep(0.02)"): "the pace of a user pressing Ctrl-C again and again",
    (
        "src/lightning_gpu_engine/testing/ranks.py",
        "time.sleep(3600)",
    ): "a rank paused at a step until the test kills it",
    ("tests/image_classification/pause_ranks.py", "time.sleep(3600)"): "a rank paused until the test kills its group",
}
SLEEP = re.compile(r"\bsleep\(")
# What in a test's code starts several processes of one run
MULTIPROCESS = re.compile(r"--devices=2|--nproc-per-node|torch\.distributed\.run|\"NODE_RANK\": ")
# Tests that name several devices yet start no process: each with why
IN_PROCESS = {
    "tests/test_sharded_checkpoints.py::test_sharded_under_a_tasks_own_lightning_strategy_is_refused_in_one_line": (
        "refused in pytest's own process through main, before a trainer or a second rank exists"
    ),
}


@pytest.fixture(scope="module")
def suites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """Each task's bake's test files by path, the engine's suite and its test helpers as `engine`, and the template's
    own as `template`."""
    own = {f"template/{p.name}": p.read_text() for p in sorted(HERE.glob("*.py")) if p.name != Path(__file__).name}
    helpers = [*(ENGINE / "tests").rglob("*.py"), *(ENGINE / "src" / "lightning_gpu_engine" / "testing").glob("*.py")]
    found = {"template": own, "engine": {str(p.relative_to(ENGINE)): p.read_text() for p in sorted(helpers)}}
    for task in ("image-classification", "language-model"):
        project = bake(tmp_path_factory.mktemp(task), task=task)
        found[task] = {str(p.relative_to(project)): p.read_text() for p in sorted((project / "tests").rglob("*.py"))}
    return found


def test_no_test_sleeps_but_where_the_list_says_why(suites: dict[str, dict[str, str]]) -> None:
    found = {
        (path, line.strip())
        for files in suites.values()
        for path, text in files.items()
        for line in text.splitlines()
        if SLEEP.search(line)
    }
    assert sorted(found - set(ALLOWED_SLEEPS)) == [], "wait on what the run announces, or add it to the list with why"
    assert sorted(set(ALLOWED_SLEEPS) - found) == [], "an allowed sleep is gone: take it off the list"


def test_every_test_that_starts_several_processes_of_a_run_is_marked_multiprocess(
    suites: dict[str, dict[str, str]],
) -> None:
    unmarked = []
    for task in ("image-classification", "language-model", "engine"):
        for path, text in suites[task].items():
            tree = ast.parse(text)
            module_marks = " ".join(
                ast.get_source_segment(text, node) or ""
                for node in tree.body
                if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
            )
            for test in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")):
                marks = " ".join(ast.get_source_segment(text, d) or "" for d in test.decorator_list) + module_marks
                if MULTIPROCESS.search(ast.get_source_segment(text, test) or "") and "multiprocess" not in marks:
                    unmarked.append(f"{path}::{test.name}")
    assert sorted(set(unmarked) - set(IN_PROCESS)) == [], "mark each @pytest.mark.multiprocess (or its parameter)"
    assert sorted(set(IN_PROCESS) - set(unmarked)) == [], "an in-process exception is gone: take it off the list"
