"""scripts/gpu_evidence.sh runs on GPU images without cookiecutter when given a baked project, never records a result
where no GPU ran it, and calls a run incomplete unless every selected GPU test passed: pytest's own exit status says
0 when every test skips, so the verdict comes from the counts in pytest's report (scripts/pytest_verdict.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import TEMPLATE, bake, run

SCRIPT = TEMPLATE / "scripts" / "gpu_evidence.sh"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bake(tmp_path_factory.mktemp("evidence"))


@pytest.fixture
def python_without_cookiecutter(tmp_path: Path) -> Path:
    """An interpreter wrapper whose environment cannot import cookiecutter, as on a GPU image."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "cookiecutter.py").write_text("raise ImportError('cookiecutter is not installed here')\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{blocked}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def evidence_files() -> set[Path]:
    return {p for folder in ("gpu-evidence", "benchmarks") for p in (TEMPLATE / "docs" / folder).glob("*.*")}


def test_without_cookiecutter_it_asks_for_a_baked_project(python_without_cookiecutter: Path) -> None:
    before = evidence_files()
    result = run("bash", SCRIPT, cwd=TEMPLATE, env={"PYTHON": str(python_without_cookiecutter)})
    assert result.returncode == 2
    expected = f"error: {python_without_cookiecutter} lacks one of cookiecutter, lightning, pytest, torch; "
    expected += "install them, or pass an already-baked PROJECT_DIR"
    assert result.stderr.strip().splitlines() == [expected]
    assert evidence_files() == before


def test_a_baked_project_needs_no_cookiecutter_and_nothing_is_recorded_without_a_gpu(
    project: Path, python_without_cookiecutter: Path
) -> None:
    before = evidence_files()
    env = {"PYTHON": str(python_without_cookiecutter), "CUDA_VISIBLE_DEVICES": ""}
    result = run("bash", SCRIPT, project, cwd=TEMPLATE, env=env)
    assert result.returncode == 2
    # Past the import check (which no longer asks for cookiecutter), stopped only by the missing GPU.
    assert result.stderr.strip().splitlines() == [
        "error: torch sees no CUDA GPU here; nothing recorded: this script records GPU results only where a GPU ran them"
    ]
    assert evidence_files() == before


def test_a_folder_that_is_not_a_baked_project_is_refused_in_one_line(tmp_path: Path) -> None:
    result = run("bash", SCRIPT, tmp_path, cwd=TEMPLATE)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: PROJECT_DIR: {tmp_path} is not a baked project (no train.py and src/ there)"
    ]


VERDICT = TEMPLATE / "scripts" / "pytest_verdict.py"
SUITES = {  # test files whose real pytest reports the verdict reads
    "passes": "import pytest\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n\n@pytest.mark.gpu\ndef test_b():\n    pass\n",
    "skips": "import pytest\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n\n"
    "@pytest.mark.gpu\n@pytest.mark.skipif(True, reason='needs TorchCodec')\ndef test_b():\n    pass\n",
    "fails": "import pytest\n\n@pytest.mark.gpu\ndef test_a():\n    assert 1 == 2, 'one is not two'\n",
    "breaks": "import pytest\nimport no_such_module\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n",
    "selects nothing": "def test_on_cpu():\n    pass\n",
    "dies": "import os\nimport pytest\n\n@pytest.mark.gpu\ndef test_a():\n    assert 1 == 2, 'one is not two'\n\n"
    "@pytest.mark.gpu\ndef test_b():\n    os._exit(1)  # as a job stopped at its time limit: no summary, no report\n",
}
MUST_PASS = "; every selected test must pass, none may skip"
USAGE = "[--step all|tests|train|bench] [--out DIR] [--wheels DIR] [PROJECT_DIR]"
PYPROJECT = '[tool.pytest.ini_options]\nmarkers = ["gpu: needs a GPU"]\n'


def pytest_report(folder: Path, suite: str) -> Path:
    """The --junitxml report of `pytest -m gpu` on one of SUITES, as the evidence script runs it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(PYPROJECT)
    (folder / "tests").mkdir(exist_ok=True)
    (folder / "tests" / "test_suite.py").write_text(SUITES[suite])
    run(sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "--junitxml=report.xml", cwd=folder)
    return folder / "report.xml"


@pytest.mark.parametrize(
    ("suite", "verdict"),
    [
        ("passes", ["evidence complete: 2 selected, 2 passed, 0 failed, 0 errors, 0 skipped"]),
        (
            "skips",
            [
                "evidence incomplete: 2 selected, 1 passed, 0 failed, 0 errors, 1 skipped" + MUST_PASS,
                "  SKIPPED: tests.test_suite::test_b: needs TorchCodec",
            ],
        ),
        (
            "fails",
            [
                "evidence incomplete: 1 selected, 0 passed, 1 failed, 0 errors, 0 skipped" + MUST_PASS,
                "  FAILED: tests.test_suite::test_a: AssertionError: one is not two",
            ],
        ),
        ("selects nothing", ["evidence incomplete: 0 selected, 0 passed, 0 failed, 0 errors, 0 skipped; no test ran"]),
    ],
)
def test_the_verdict_counts_every_skip_and_failure_in_a_real_pytest_report(
    tmp_path: Path, suite: str, verdict: list[str]
) -> None:
    result = run(sys.executable, VERDICT, pytest_report(tmp_path, suite), cwd=tmp_path)
    assert result.stdout.splitlines() == verdict
    assert result.returncode == (0 if suite == "passes" else 1)


def test_a_collection_error_or_a_missing_report_is_incomplete(tmp_path: Path) -> None:
    result = run(sys.executable, VERDICT, pytest_report(tmp_path / "breaks", "breaks"), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0].startswith("evidence incomplete: 1 selected, 0 passed, 0 failed, 1 errors")
    assert "ModuleNotFoundError" in result.stdout or "collection failure" in result.stdout
    missing = run(sys.executable, VERDICT, tmp_path / "never-written.xml", cwd=tmp_path)
    assert missing.returncode == 1 and "pytest did not finish" in missing.stdout


@pytest.fixture
def python_with_a_fake_gpu(tmp_path: Path) -> Path:
    """An interpreter wrapper whose torch reports one CUDA GPU, and an nvidia-smi beside it: the script's own logic,
    run on a CPU. Anything that really uses the GPU still fails, so no result of this can pass for a GPU's."""
    site = tmp_path / "fake-gpu-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import types, torch\n"
        "torch.cuda.is_available = lambda: True\n"
        "torch.cuda.device_count = lambda: 1\n"
        "torch.cuda.is_bf16_supported = lambda *a, **k: True\n"
        "torch.cuda.get_device_name = lambda *a: 'Fake GPU 80GB'\n"
        "torch.cuda.get_device_properties = lambda *a: types.SimpleNamespace(\n"
        "    name='Fake GPU 80GB', major=9, minor=0, total_memory=80 * 2**30)\n"
    )
    bin_dir = tmp_path / "fake-gpu-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'Fake GPU 80GB, 000.00, 81559 MiB'\n")
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    for tool in (bin_dir / "nvidia-smi", wrapper):
        tool.chmod(0o755)
    return wrapper


def fake_project(root: Path, suite: str) -> Path:
    """The least the script needs of a baked project: train.py, src/<package>/engine/config.py and gpu-marked tests."""
    pytest_report(root, suite)
    (root / "train.py").write_text("")
    (root / "src" / "pkg" / "engine").mkdir(parents=True)
    (root / "src" / "pkg" / "engine" / "config.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass Config:\n    precision: str = 'auto'\n"
        "    compile: bool | None = None\n    channels_last: bool = True\n    strategy: str = 'auto'\n"
        "    logger: str = 'csv'\n"
    )
    return root


@pytest.mark.parametrize("suite", ["passes", "skips", "dies"])
def test_the_tests_step_records_its_verdict_and_calls_a_run_with_any_skip_incomplete(
    tmp_path: Path, python_with_a_fake_gpu: Path, suite: str
) -> None:
    project = fake_project(tmp_path / "project", suite)
    out = tmp_path / "evidence"
    env = {
        "PYTHON": str(python_with_a_fake_gpu),
        "PATH": f"{python_with_a_fake_gpu.parent}:{os.environ['PATH']}",
        "PIP_NO_INDEX": "1",  # no TorchCodec from a registry: a CPU's decode check fails anyway
    }
    args = ["--step", "tests", "--out", out, "--wheels", tmp_path / "no-wheels", project]
    result = run("bash", SCRIPT, *args, cwd=TEMPLATE, env=env)
    [evidence] = (out / "gpu-evidence").glob("*-fake-gpu-80gb-tests.txt")
    text = evidence.read_text()
    assert "template commit: " in text and "bake defaults: {'precision': 'auto'" in text and "Fake GPU 80GB" in text
    assert "torchcodec: none usable" in text
    reports = list((out / "gpu-evidence").glob("*-fake-gpu-80gb-tests.xml"))
    assert [r.read_text()[:5] for r in reports] == ([] if suite == "dies" else ["<?xml"])
    if suite == "dies":  # the failure's message is kept although pytest never reached its summary
        assert result.returncode == 1
        assert "tests/test_suite.py::test_a failed (call)" in text and "AssertionError: one is not two" in text
        assert "evidence incomplete: no readable pytest report" in text and "pytest did not finish" in text
    elif suite == "passes":
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "evidence complete: 2 selected, 2 passed" in text
        assert text.rstrip().endswith("evidence complete: every step passed")
    else:
        assert result.returncode == 1
        assert "  SKIPPED: tests.test_suite::test_b: needs TorchCodec" in text
        assert text.rstrip().endswith(
            "evidence incomplete: 0 command(s) failed; not every test passed in: single-GPU tests"
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step", "everything"], "error: --step: 'everything' is not one of all, tests, train, bench"),
        (
            ["--verbose"],
            "error: unknown option --verbose; usage: scripts/gpu_evidence.sh " + USAGE,
        ),
    ],
)
def test_bad_options_are_refused_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = run("bash", SCRIPT, *args, cwd=TEMPLATE)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [message]
