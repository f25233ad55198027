"""The generated project's own test suite passes on CPU for the defaults and for bakes whose GPU defaults differ."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import bake, run

REPRESENTATIVE = {
    "defaults": {},
    "fp16-fsdp-csv": {"precision": "16-mixed", "strategy": "fsdp", "logger": "csv"},
    "fp32-eager-nchw-mlflow": {"precision": "32-true", "compile": "no", "channels_last": "no", "logger": "mlflow"},
}


# Minute-long files whose runs pin every flag a bake's answers set a default for (accelerator, precision, strategy,
# logger; compile is off on a CPU whatever the answer): a bake's answers cannot change what they run, so they run in
# the defaults bake only, keeping CI within its time.
ANSWER_INDEPENDENT = [
    "test_stops.py",
    "test_checkpoints.py",
    "test_resume.py",
    "test_distributed.py",
    "test_bench.py",
    "test_predict.py",
    "test_export.py",
    "test_folder_resume.py",
    "test_transforms.py",
    "test_data.py",
    "test_finetune.py",
    "test_fsdp_layout.py",
    "gpu",  # on a CPU, the GPU tests' twins pass --accelerator, --precision, --compile and --channels-last themselves
]


@pytest.mark.parametrize(
    "answers",
    # minutes: on 2 busy cores (conftest.py deals the long tests to xdist workers by it)
    [pytest.param(a, id=k, marks=pytest.mark.suite(minutes=11 if not a else 3)) for k, a in REPRESENTATIVE.items()],
)
def test_generated_suite_passes(tmp_path: Path, answers: dict[str, str]) -> None:
    project = bake(tmp_path, **answers)
    for name in ANSWER_INDEPENDENT:
        assert (project / "tests" / name).exists(), f"{name} is gone: update ANSWER_INDEPENDENT"
    skip = [f"--ignore=tests/{name}" for name in ANSWER_INDEPENDENT] if answers else []
    result = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *skip, cwd=project, timeout=1200)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1]


@pytest.mark.suite(minutes=12)
def test_generated_slow_tests_pass(tmp_path: Path) -> None:
    """`pytest -m slow` of the default bake: every model --model can name trains, and pretrained weights transfer."""
    project = bake(tmp_path)
    result = run(
        sys.executable, "-m", "pytest", "-q", "-m", "slow", "-p", "no:cacheprovider", cwd=project, timeout=2400
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1] and " failed" not in result.stdout.splitlines()[-1]
