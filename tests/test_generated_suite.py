"""The generated project's own test suite passes on CPU for the defaults and for bakes whose GPU defaults differ."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import bake, run

# Bakes whose GPU defaults differ from the defaults bake's.
FP16_FSDP_CSV = {"precision": "16-mixed", "strategy": "fsdp", "logger": "csv"}
FP32_EAGER_NCHW_MLFLOW = {"precision": "32-true", "compile": "no", "channels_last": "no", "logger": "mlflow"}


# The engine's suite (tests/engine/) runs the toy task with every flag a bake's answers set a default for pinned
# (accelerator, precision, strategy, logger; compile is off on a CPU whatever the answer), and the image task's suite
# pins them too: each task's defaults bake runs them whole. The other bakes run only the files that read an answer,
# which the test below finds to be the only files that differ between the bakes. ENGINE in a list below: the bake's
# tests/engine/ files but ENGINE_IN_EVERY_BAKE (its defaults are the answers, and it runs the bake's own scripts).
ENGINE_IN_EVERY_BAKE = ["engine/test_config.py"]
ENGINE = "engine/*"
ANSWER_READERS = [*ENGINE_IN_EVERY_BAKE, "image_classification/test_config.py"]
ANSWER_HOLDERS = ["engine/config.py"]  # under src/<package>/: the answers as the engine's defaults

# The defaults bake's suite is split so that its parts share the two CI cores: the engine's suite (its signal and
# multi-process files a part of their own), the image task's stop-and-resume files, and the sweep's (a few minutes of
# train.py subprocesses) are parts of their own.
ENGINE_PROCESSES = ["engine/test_stops.py", "engine/test_distributed.py", "engine/test_multinode.py"]
ENGINE_PROCESSES += ["engine/test_compile_cache.py", "engine/test_muon.py", "engine/test_sharded_checkpoints.py"]
IMAGE_STOPS_AND_RESUMES = [
    f"image_classification/{name}"
    for name in (
        "test_checkpoints.py",
        "test_resume.py",
        "test_resume_changes.py",
        "test_distributed.py",
        "test_validation_stop.py",
        "test_folder_resume.py",
    )
]
SWEEP = ["image_classification/test_sweep.py"]
# streaming from LitData chunks on a local S3 server, stopped and resumed on 1 device, 2 ranks and 2 nodes
IMAGE_STREAMING = ["image_classification/test_streaming.py"]
LM_STREAMING = ["language_model/test_streaming.py"]
LM = {"task": "language-model"}
# id: (answers, files left out, the only files run, its CPU-minutes: conftest.py holds it to them). Measured on 2 cores
# by .ci/run's summary from a clean clone (engine 14.37, its processes 6.89, language model 5.55, defaults 5.30,
# streaming 4.38 and 2.88, sweep 3.12, stops 1.79, the fp16 and fp32 bakes 0.17 and 0.16), rounded up by about a tenth
SUITES = {
    "defaults": ({}, ["engine", *IMAGE_STOPS_AND_RESUMES, *SWEEP, *IMAGE_STREAMING], [], 6),
    "defaults-engine": ({}, ENGINE_PROCESSES, ["engine"], 16),
    "defaults-engine-processes": ({}, [], ENGINE_PROCESSES, 7.5),
    "defaults-image-stops-and-resumes": ({}, [], IMAGE_STOPS_AND_RESUMES, 2),
    "defaults-sweep": ({}, [], SWEEP, 3.5),
    "defaults-streaming": ({}, [], IMAGE_STREAMING, 4.8),
    "fp16-fsdp-csv": (FP16_FSDP_CSV, [], ANSWER_READERS, 0.5),  # 0.5 for a time limit of 90 s, above its wall time
    "fp32-eager-nchw-mlflow": (FP32_EAGER_NCHW_MLFLOW, [], ANSWER_READERS, 0.5),
    "language-model": (LM, [ENGINE, *LM_STREAMING], [], 6.5),
    "language-model-streaming": (LM, [], LM_STREAMING, 3.2),
    # The language model's bake runs its own conformance suite (tests/language_model/), and the engine's suite once,
    # in the defaults bake: the test below proves that suite, the engine and the README's task the same in every bake.
}


def expand(names: list[str], project: Path) -> list[str]:
    """ENGINE made the bake's tests/engine/ files but ENGINE_IN_EVERY_BAKE; every name checked to exist in the bake."""
    engine = sorted(f"engine/{p.name}" for p in (project / "tests" / "engine").glob("test_*.py"))
    expanded: list[str] = []
    for name in names:
        expanded += [e for e in engine if e not in ENGINE_IN_EVERY_BAKE] if name == ENGINE else [name]
    for name in expanded:
        assert (project / "tests" / name).exists(), f"{name} is gone: update the lists above"
    return expanded


@pytest.mark.parametrize(
    ("answers", "left_out", "only_these"),
    [
        pytest.param(a, out, only, id=k, marks=[pytest.mark.suite, pytest.mark.minutes(m)])
        for k, (a, out, only, m) in SUITES.items()
    ],
)
def test_generated_suite_passes(
    tmp_path: Path,
    time_limit: float,
    suite_isolation: tuple[list[str], dict[str, str]],
    answers: dict[str, str],
    left_out: list[str],
    only_these: list[str],
) -> None:
    project = bake(tmp_path, **answers)
    if answers.get("task") != "language-model":  # a file the image bake's lists name and the bake lacks: update them
        expand([*ANSWER_READERS, *IMAGE_STOPS_AND_RESUMES, *ENGINE_PROCESSES], project)
    only = [f"tests/{name}" for name in expand(only_these, project)]
    skip = [f"--ignore=tests/{name}" for name in expand(left_out, project)]
    prefix, env = suite_isolation
    pytest_run = [*prefix, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *skip, *only]
    result = run(*pytest_run, cwd=project, timeout=time_limit, env=env)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1]


def sources(project: Path, package: str, task: str) -> dict[str, str]:
    """The engine, the task, their suites and the README's toy task, by path, the package named P in both."""
    readme = (project / "README.md").read_text().split("\n## Bring your own task\n", 1)[1].split("\n## ", 1)[0]
    files = {"README.md#Bring your own task": readme}
    folders = [project / "src" / package / "engine", project / "src" / package / "tasks" / task]
    paths = [
        path
        for folder in [*folders, project / "tests" / "engine", project / "tests" / task]
        for path in sorted(folder.rglob("*.py"))
    ]
    for path in [*paths, *sorted((project / "tests").glob("*.py"))]:  # and the helpers every suite shares
        files[str(path.relative_to(project)).replace(f"src/{package}/", "src/P/")] = path.read_text()
    # the package as code names it (a comment may name the other task's folder, language_model, as a word)
    named = {f"{package}.engine": "P.engine", f"{package}.sweep": "P.sweep", f'"{package}"': '"P"'}
    for name, text in files.items():
        for real, plain in named.items():
            text = text.replace(real, plain)
        files[name] = text
    return files


def test_every_bake_has_the_same_engine_its_suite_and_the_readme_task(tmp_path: Path) -> None:
    """What lets a task's defaults bake stand for its other bakes, and the image task's run of tests/engine/ for every
    bake's (20 minutes of CI a bake): the engine, its suite and the README's toy task that suite trains are the same
    files in every bake but for the package name, and a task's files and suite the same in each of its bakes but for
    the files that read an answer, which every bake runs."""
    image = sources(bake(tmp_path / "image"), "image_classifier", "image_classification")
    language = sources(bake(tmp_path / "language", **LM), "language_model", "language_model")
    engine = [n for n in image if n.startswith(("README.md", "src/P/engine/", "tests/engine/"))]
    assert len(engine) > 40, "the engine and its suite were not found"
    assert [n for n in engine if image[n] != language.get(n)] == []
    assert sorted(n for n in language if n.startswith(("src/P/engine/", "tests/engine/")) and n not in image) == []

    readers = {f"tests/{name}" for name in ANSWER_READERS} | {f"src/P/{name}" for name in ANSWER_HOLDERS}
    for name, answers in (("fp16", FP16_FSDP_CSV), ("fp32", FP32_EAGER_NCHW_MLFLOW)):
        other = sources(bake(tmp_path / name, **answers), "image_classifier", "image_classification")
        assert sorted(other) == sorted(image)
        differ = {n for n in image if image[n] != other[n]}
        assert differ and differ <= readers, f"{name}: read an answer but are not run in its bake: {differ - readers}"
    assert len([n for n in image if n.startswith("tests/image_classification/")]) > 20, "the task's suite was found"


ZOO = "image_classification/test_model_zoo.py"  # every model --model can name: guarded (.ci/guarded.toml)


@pytest.mark.parametrize(
    "task",
    [
        pytest.param("image-classification", marks=[pytest.mark.suite, pytest.mark.minutes(0.5)]),
        pytest.param("language-model", marks=[pytest.mark.suite, pytest.mark.minutes(2)]),
    ],
)
def test_generated_slow_tests_pass(
    tmp_path: Path, time_limit: float, suite_isolation: tuple[list[str], dict[str, str]], task: str
) -> None:
    """`pytest -m slow` of each task's default bake, but the model zoo (the test below). Images: pretrained weights
    transfer. Language model: configs/cpu-quickstart.yaml gets within 0.15 nats of the entropy floor."""
    project = bake(tmp_path, task=task)
    zoo = [f"--ignore=tests/{ZOO}"] if (project / "tests" / ZOO).exists() else []
    prefix, env = suite_isolation
    pytest_run = [*prefix, sys.executable, "-m", "pytest", "-q", "-m", "slow", "-p", "no:cacheprovider", *zoo]
    result = run(*pytest_run, cwd=project, timeout=time_limit, env=env)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1] and " failed" not in result.stdout.splitlines()[-1]


@pytest.mark.suite
@pytest.mark.minutes(10)
def test_generated_model_zoo_trains_every_model(
    tmp_path: Path, time_limit: float, suite_isolation: tuple[list[str], dict[str, str]]
) -> None:
    """Every torchvision classifier and a sample of timm families trains a step in the image task's default bake."""
    project = bake(tmp_path)
    prefix, env = suite_isolation
    pytest_run = [*prefix, sys.executable, "-m", "pytest", "-q", "-m", "slow", "-p", "no:cacheprovider", f"tests/{ZOO}"]
    result = run(*pytest_run, cwd=project, timeout=time_limit, env=env)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1] and " failed" not in result.stdout.splitlines()[-1]
