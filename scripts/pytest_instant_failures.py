"""A pytest plugin for evidence runs: each failure's traceback is printed the moment its test ends.

pytest prints tracebacks in its summary, at the very end, which a step stopped at a job's time limit never reaches:
the first H100 run lost a failure's message that way. `-p pytest_instant_failures` with this folder on PYTHONPATH.
"""

from __future__ import annotations

import pytest


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        print(f"\n----- {report.nodeid} failed ({report.when}):\n{report.longreprtext}\n-----", flush=True)
