"""A landing proves everything within its budget: the `minutes` markers of every test it runs add up to at most
BUDGET_MINUTES. Static: the markers are read, nothing is run; a run's summary names each test over its marker in CPU
time (conftest.py), which a busy machine's load can put there, so the budget is kept here and never by failing a run."""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import BUDGET_MINUTES, GUARDED_TESTS, UNMARKED_CPU_MINUTES

HERE = Path(__file__).parent
TEMPLATE = HERE.parent
# The CPU-minutes of every test without a marker together (conftest.py's summary prints them after a run; each is
# under UNMARKED_CPU_MINUTES, or the summary names it): bakes, hooks, lint, cruft, the GPU-evidence script's checks.
# Measured 0.93 on this machine, with other work beside it (2026-11-28)
UNMARKED_MINUTES = 1.0


def marks_of(obj: Any) -> list[pytest.Mark]:
    return list(getattr(obj, "pytestmark", []))


def minutes_in(marks: list[pytest.Mark]) -> float | None:
    found = [float(m.args[0]) for m in marks if m.name == "minutes"]
    return found[-1] if found else None


def case_id(value: Any, index: int, ids: Any) -> str:
    """As pytest names a case, near enough to find it: its id, or its one plain value, or its place."""
    if getattr(value, "id", None):
        return str(value.id)
    if isinstance(ids, list):
        return str(ids[index])
    plain = value.values if hasattr(value, "marks") else (value,)  # pytest.param's, or the value itself
    return str(plain[0]) if len(plain) == 1 and isinstance(plain[0], str | int) else str(index)


def cases(test: Callable[..., Any]) -> Iterator[tuple[str, list[pytest.Mark]]]:
    """Each case pytest makes of `test` (one per combination of its parametrize values), with the marks it carries."""
    parametrized = [m for m in marks_of(test) if m.name == "parametrize"]
    own = [m for m in marks_of(test) if m.name != "parametrize"]
    choices = []
    for mark in parametrized:
        values = list(mark.args[1])
        ids = mark.kwargs.get("ids")
        choices.append(
            [
                (case_id(v, i, ids), [getattr(m, "mark", m) for m in getattr(v, "marks", ())])
                for i, v in enumerate(values)
            ]
        )
    for combination in itertools.product(*choices):
        name = "-".join(case_id for case_id, _ in combination)
        yield name, [*own, *(m for _, marks in combination for m in marks)]


def landing() -> dict[str, float]:
    """Every marked test a landing runs (`pytest --landing tests`, the guarded ones left out): its id and minutes."""
    found: dict[str, float] = {}
    for path in sorted(HERE.glob("test_*.py")):
        module = importlib.import_module(path.stem)
        for name, test in vars(module).items():
            if not name.startswith("test_") or getattr(test, "__module__", None) != module.__name__:
                continue
            if f"tests/{path.name}::{name}" in GUARDED_TESTS:
                continue
            for case, marks in cases(test):
                minutes = minutes_in([*marks_of(module), *marks])
                if minutes:
                    found[f"{path.name}::{name}[{case}]" if case else f"{path.name}::{name}"] = minutes
    return found


def test_a_landing_fits_in_the_budget() -> None:
    marked = landing()
    total = sum(marked.values()) + UNMARKED_MINUTES
    largest = sorted(marked.items(), key=lambda kv: -kv[1])[:8]
    assert total <= BUDGET_MINUTES, (
        f"a landing needs {total:g} CPU-minutes, {total - BUDGET_MINUTES:g} over the budget of {BUDGET_MINUTES}: "
        "make room before adding; the largest: " + ", ".join(f"{name} {m:g}" for name, m in largest)
    )


def test_every_guarded_test_exists_and_guards_files_that_exist() -> None:
    """.ci/guarded.toml names tests by node id and files by path: a rename would silently put them in every landing or
    in none."""
    for test, entry in GUARDED_TESTS.items():
        file, name = test.split("::")
        assert hasattr(importlib.import_module(Path(file).stem), name), f"{test} is not a test"
        assert entry.why and entry.paths, test
        assert [p for p in entry.paths if not (TEMPLATE / p).exists()] == [], f"{test} guards files that do not exist"


def test_the_budget_counts_every_generated_suite_part_and_what_conftest_lets_go_unmarked() -> None:
    from test_generated_suite import ENGINE_PARTS, SUITES

    marked = landing()
    for test, listed in (
        ("test_generated_suite_passes", SUITES),
        ("test_the_engines_suite_passes_against_its_wheel", ENGINE_PARTS),
    ):
        parts = {name.split("[")[1].rstrip("]"): m for name, m in marked.items() if f"::{test}[" in name}
        assert parts == {part: minutes for part, (*_, minutes) in listed.items()}, test
    assert UNMARKED_CPU_MINUTES <= 1, "a test of minutes without a marker would hide from the budget"
