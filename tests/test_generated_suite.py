"""The generated project's own test suite passes on CPU for the defaults and for bakes whose GPU defaults differ."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import bake, run

# Bakes whose GPU defaults differ from the defaults bake's.
FP16_FSDP_CSV = {"precision": "16-mixed", "strategy": "fsdp", "logger": "csv"}
FP32_EAGER_NCHW_MLFLOW = {"precision": "32-true", "compile": "no", "channels_last": "no", "logger": "mlflow"}


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
    "test_multinode.py",
    "test_metric_state.py",
    "test_tool_stops.py",
    "test_full_disk.py",
    "test_validation_stop.py",
    "test_inputs.py",
    "test_resume_changes.py",
    "test_own_task.py",
    "test_layout.py",
    "test_sweep.py",
    "gpu",  # on a CPU, the GPU tests' twins pass --accelerator, --precision, --compile and --channels-last themselves
]


# The defaults bake's own suite is the longest single test: its stop-and-resume files run as a test of their own, so
# the two halves share the two CI cores instead of one of them running both.
STOPS_AND_RESUMES = [
    "test_stops.py",
    "test_checkpoints.py",
    "test_resume.py",
    "test_resume_changes.py",
    "test_distributed.py",
    "test_multinode.py",
    "test_validation_stop.py",
    "test_full_disk.py",
    "test_own_task.py",
]
# The sweep's tests (a few minutes of train.py subprocesses) are a third part.
SWEEP = ["test_sweep.py"]
# The language model's bake shares the engine's tests that need no task with the image bake, which runs them.
LM = {"task": "language-model"}
TASK_FREE = ["test_own_task.py", "test_metric_state.py"]
SUITES = {  # id: (answers, files left out, the only files run, minutes on 2 busy cores: conftest.py deals by it)
    "defaults": ({}, STOPS_AND_RESUMES + SWEEP, [], 6),
    "defaults-stops-and-resumes": ({}, [], STOPS_AND_RESUMES, 6),
    "defaults-sweep": ({}, [], SWEEP, 5),
    "fp16-fsdp-csv": (FP16_FSDP_CSV, ANSWER_INDEPENDENT, [], 3),
    "fp32-eager-nchw-mlflow": (FP32_EAGER_NCHW_MLFLOW, ANSWER_INDEPENDENT, [], 3),
    "language-model": (LM, TASK_FREE, [], 5),
}


@pytest.mark.parametrize(
    ("answers", "left_out", "only_these"),
    [pytest.param(a, out, only, id=k, marks=pytest.mark.suite(minutes=m)) for k, (a, out, only, m) in SUITES.items()],
)
def test_generated_suite_passes(
    tmp_path: Path, answers: dict[str, str], left_out: list[str], only_these: list[str]
) -> None:
    project = bake(tmp_path, **answers)
    names = TASK_FREE if answers.get("task") == "language-model" else ANSWER_INDEPENDENT + STOPS_AND_RESUMES + SWEEP
    for name in names:
        assert (project / "tests" / name).exists(), f"{name} is gone: update the lists above"
    only = [f"tests/{name}" for name in only_these]
    skip = [f"--ignore=tests/{name}" for name in left_out]
    result = run(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *skip, *only, cwd=project, timeout=1200
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1]


@pytest.mark.parametrize(
    "task",
    [
        pytest.param("image-classification", marks=pytest.mark.suite(minutes=12)),
        pytest.param("language-model", marks=pytest.mark.suite(minutes=4)),
    ],
)
def test_generated_slow_tests_pass(tmp_path: Path, task: str) -> None:
    """`pytest -m slow` of each task's default bake. Images: every model --model can name trains, and pretrained
    weights transfer. Language model: configs/cpu-quickstart.yaml gets within 0.15 nats of the entropy floor."""
    project = bake(tmp_path, task=task)
    result = run(
        sys.executable, "-m", "pytest", "-q", "-m", "slow", "-p", "no:cacheprovider", cwd=project, timeout=2400
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1] and " failed" not in result.stdout.splitlines()[-1]
