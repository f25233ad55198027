"""conftest.py keeps the budget by reporting, not by failing: a test over its `minutes` marker in CPU time passes and
is named in the summary (CPU time grows with a busy machine's load), while a run that outlives its wall-time limit is
killed as a suspected hang. Both are seen as a user sees them: a pytest run of tests that use this conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import TEMPLATE, run

HERE = Path(__file__).parent
TESTS = """
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run

BURN = "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end:\\n    pass"


@pytest.mark.minutes(0.001)
def test_over_its_marker():
    subprocess.run([sys.executable, "-c", BURN], check=True)  # 0.01 CPU-minutes: 10x its marker


@pytest.mark.minutes(1)
def test_hangs(time_limit):
    print(f"time limit {time_limit:.0f} s")
    run(sys.executable, "-c", "import threading; threading.Event().wait()", cwd=Path.cwd(), timeout=1)
"""


def test_a_test_over_its_marker_passes_named_in_the_summary_and_a_hang_is_cut_and_said(tmp_path: Path) -> None:
    (tmp_path / "test_timed.py").write_text(TESTS)
    # the template's own settings (its markers, --strict-markers) and this conftest.py as a plugin, over a file outside
    result = run(
        sys.executable,
        "-m",
        "pytest",
        "-c",
        TEMPLATE / "pyproject.toml",
        "--rootdir",
        tmp_path,
        "-p",
        "conftest",
        "-p",
        "no:cacheprovider",
        "-rA",
        tmp_path / "test_timed.py",
        cwd=tmp_path,
        env={"PYTHONPATH": str(HERE)},
    )
    out = result.stdout
    assert result.returncode == 1 and "1 failed, 1 passed" in out, out[-4000:] + result.stderr[-2000:]
    assert "PASSED test_timed.py::test_over_its_marker" in out, out[-4000:]
    section = out.split("over their markers: reported, never failed for time (conftest.py)")[1]
    [line] = section.split("short test summary info")[0].strip(" =\n").splitlines()
    assert line.startswith("test_timed.py::test_over_its_marker needed 0.0"), line
    assert "x its minutes(0.001) marker, over the 1.3x it may" in line, line
    assert "time limit 360 s" in out, "a minutes(1) test's runs may take 6 minutes: twice the 3 that held on CI"
    assert "killed after 1 s: a hang is suspected" in out, out[-4000:]
