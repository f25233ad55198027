"""Whether a pytest run (its --junitxml report) is complete evidence: every selected test ran and passed.

pytest exits 0 when every selected test skips, so its exit status cannot tell a GPU run from a run that proved
nothing. This reads the counts from the report, lists every skip with its reason and every failure or error with
its message, and exits 0 only when the tests that passed are all the tests that were selected (and there were some).
A run stopped by SIGINT (a time box's end) still writes its report, the tests it had reached counted as passed and
the one it was running left nameless: that test makes the run incomplete, and what it never reached is not there.

    python scripts/pytest_verdict.py REPORT.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

OUTCOMES = {"failure": "failed", "error": "errors", "skipped": "skipped"}  # junit's tag: pytest's word


def outcome(case: ET.Element) -> tuple[str, str]:
    if case.get("name") is None:
        return "interrupted", "pytest was interrupted while it ran"
    for tag, kind in OUTCOMES.items():
        child = case.find(tag)
        if child is not None:
            return kind, (child.get("message") or (child.text or "").strip() or "no message").splitlines()[0]
    return "passed", ""


def verdict(report: Path) -> tuple[bool, list[str]]:
    """(complete, lines to print)."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError) as err:
        return False, [f"evidence incomplete: no readable pytest report at {report} ({err}); pytest did not finish"]
    cases = root.findall(".//testcase")
    counts = dict.fromkeys(("passed", *OUTCOMES.values(), "interrupted"), 0)
    lines = []
    for case in cases:
        kind, message = outcome(case)
        counts[kind] += 1
        if kind != "passed":
            name = "::".join(filter(None, (case.get("classname"), case.get("name")))) or "a test"
            lines.append(f"  {kind.upper()}: {name}: {message}")
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n or kind != "interrupted")
    complete = len(cases) > 0 and counts["passed"] == len(cases)
    if complete:
        head = f"evidence complete: {len(cases)} selected, {summary}"
    elif counts["interrupted"]:
        head = f"evidence incomplete: interrupted, {len(cases)} in the report, {summary}; the tests it never reached "
        head += "are not counted"
    else:
        head = f"evidence incomplete: {len(cases)} selected, {summary}"
        head += "; no test ran" if not cases else "; every selected test must pass, none may skip"
    return complete, [head, *lines]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: pytest_verdict.py REPORT.xml", file=sys.stderr)
        return 2
    complete, lines = verdict(Path(argv[0]))
    print("\n".join(lines))
    return 0 if complete else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
