"""scripts/gpu_evidence.sh: `--prepare` makes on a CPU machine the one folder a GPU machine needs (both bakes, the
wheels it lacks), refusing one too big to travel; `--budget` runs the six steps in their order, each cut at the end
of its time box with its whole process group, into at most 8 files one folder down, and calls a run with any skip
incomplete (pytest's exit status says 0 when every test skips: the verdict reads pytest's report). The steps run on a
fake GPU and fake bakes here: only the script's own logic is under test, and nothing of it can pass for a GPU's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TEMPLATE, run

SCRIPT = TEMPLATE / "scripts" / "gpu_evidence.sh"
STEPS = ["image-tests", "lm-tests", "image-bench", "lm-bench", "predict-bf16", "fsdp"]
MARKERS = '[tool.pytest.ini_options]\nmarkers = ["gpu: needs a GPU"]\n'


def wheel(folder: Path, name: str, version: str = "1.0", tag: str = "py3-none-any", payload: bytes = b"") -> Path:
    """A real, installable wheel of one module `name`; `payload`: incompressible bytes to give it a size."""
    path = folder / f"{name}-{version}-{tag}.whl"
    path.parent.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}/__init__.py", "")
        whl.writestr(f"{name}/payload.bin", payload)
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n")
        whl.writestr(f"{info}/RECORD", "")
    return path


BENCH = """import argparse, json
parser = argparse.ArgumentParser()
for flag in ("--only", "--warmup", "--steps", "--rounds", "--json"):
    parser.add_argument(flag)
args = parser.parse_args()
print("bench.py --only", args.only)
row = {{"name": args.only, "default": True, "{rate}": {speed}, "mfu": 0.4}}
json.dump({{"finished": True, "settings": [row], "plain": {{"{rate}": {plain}}}, "lightning_over_plain": {ratio},
           "lightning_over_plain_rounds": [{ratio}, {ratio}]}}, open(args.json, "w"))
"""
IMAGE_SUITE = """import os, signal, subprocess
from pathlib import Path
import pytest
import fake_codec  # from the folder's wheels/

@pytest.mark.gpu
def test_fails_before_the_cut():
    assert 1 == 2, "one is not two"

@pytest.mark.gpu
def test_hangs_until_killed():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # SIGINT ignored, by what it starts too: only SIGKILL ends them
    child = subprocess.Popen(["sleep", "600"])
    Path(__file__).with_name("grandchild.pid").write_text(str(child.pid))
    child.wait()

@pytest.mark.gpu
def test_bf16_gpu_probabilities_agree():
    print("bf16 on the GPU moved a probability by 0.0123 from fp32 on the CPU")

@pytest.mark.gpu
def test_fsdp_on_one_gpu_trains():
    pass
"""
LM_SUITE = """import pytest
import fake_engine  # from a wheel inside the bake

@pytest.mark.gpu
def test_attention():
    pass

@pytest.mark.gpu
@pytest.mark.skipif(True, reason="needs TorchCodec")
def test_decoding():
    pass

@pytest.mark.gpu
def test_fsdp_on_one_gpu_trains():
    pass
"""


def fake_prepared(root: Path) -> Path:
    """What --prepare makes, with bakes whose GPU tests and benches are stand-ins of known outcomes."""
    bakes = {
        "image-classifier": (IMAGE_SUITE, {"rate": "samples_per_s", "speed": 5300, "plain": 5326.6, "ratio": 0.995}),
        "language-model": (LM_SUITE, {"rate": "tokens_per_s", "speed": 900000, "plain": 927835, "ratio": 0.97}),
    }
    for bake, (suite, bench) in bakes.items():
        (root / bake / "tests").mkdir(parents=True)
        (root / bake / "tests" / "test_gpu.py").write_text(suite)
        (root / bake / "pyproject.toml").write_text(MARKERS)
        (root / bake / "train.py").write_text("")
        (root / bake / "bench.py").write_text(BENCH.format(**bench))
        (root / f"gpu-tests-{bake}.txt").write_text("tests/test_gpu.py\n")
    wheel(root / "wheels", "fake_codec")
    wheel(root / "language-model" / "dist", "fake_engine")
    (root / "PREPARED.txt").write_text("template commit 0000000, prepared by a test\n")
    return root


@pytest.fixture(scope="module")
def python_with_a_fake_gpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interpreter wrapper whose torch, once imported, reports one CUDA GPU, and an nvidia-smi beside it. Processes
    that never import torch (the stand-in steps) pay nothing for it; anything that really uses the GPU fails."""
    root = tmp_path_factory.mktemp("fake-gpu")
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(
        "import importlib.machinery, sys, types\n\n"
        "def fake(torch):\n"
        "    torch.cuda.is_available = lambda: True\n"
        "    torch.cuda.device_count = lambda: 1\n"
        "    torch.cuda.get_device_name = lambda *a: 'Fake GPU 80GB'\n"
        "    torch.cuda.get_device_properties = lambda *a: types.SimpleNamespace(major=9, minor=0)\n\n"
        "class AfterTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name != 'torch':\n"
        "            return None\n"
        "        sys.meta_path.remove(self)\n"
        "        spec = importlib.machinery.PathFinder.find_spec(name, path)\n"
        "        load = spec.loader.exec_module\n"
        "        spec.loader.exec_module = lambda module: (load(module), fake(module))\n"
        "        return spec\n\n"
        "sys.meta_path.insert(0, AfterTorch())\n"
    )
    (root / "bin").mkdir()
    (root / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho 'Fake GPU 80GB, 000.00, 81559 MiB'\n")
    wrapper = root / "bin" / "python"
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH="{root / "site"}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n'
    )
    for tool in (root / "bin" / "nvidia-smi", wrapper):
        tool.chmod(0o755)
    return wrapper


def fake_gpu_env(python: Path) -> dict[str, str]:
    return {"PYTHON": str(python), "PATH": f"{python.parent}:{os.environ['PATH']}"}


@dataclass
class Evidence:
    result: subprocess.CompletedProcess[str]
    out: Path
    files: list[Path]  # relative to out
    prepared: Path

    def text(self, suffix: str) -> str:
        [name] = [f for f in self.files if f.name.endswith(f"-{suffix}.txt")]
        return (self.out / name).read_text()


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory, python_with_a_fake_gpu: Path) -> Evidence:
    """One run of all six steps, the first of which hangs and is cut 15 s in; the others get ample boxes."""
    root = tmp_path_factory.mktemp("evidence")
    prepared = fake_prepared(root / "prepared")
    args = ["--budget", "900", "--box", "image-tests=15", "--workers", "2", "--out", root / "out", prepared]
    result = run("bash", SCRIPT, *args, cwd=TEMPLATE, env=fake_gpu_env(python_with_a_fake_gpu))
    files = sorted(p.relative_to(root / "out") for p in (root / "out").rglob("*") if p.is_file())
    return Evidence(result, root / "out", files, prepared)


def test_the_steps_run_in_priority_order_and_each_reports_as_it_ends(evidence: Evidence) -> None:
    out = evidence.result.stdout
    announced = [line.split()[3].rstrip(":") for line in out.splitlines() if line.startswith("===== step ")]
    assert announced == STEPS, out
    summary = evidence.text("summary")
    assert [line.split()[2].rstrip(":") for line in summary.splitlines() if line.startswith("step ")] == STEPS


def test_a_step_that_outlives_its_box_is_killed_with_its_group_and_the_next_step_still_runs(
    evidence: Evidence,
) -> None:
    summary = evidence.text("summary")
    assert "step 1 image-tests: timed out after" in summary and "step 2 lm-tests: incomplete after" in summary
    text = evidence.text("1-image-tests")
    assert re.search(r"----- timed out: SIGINT at \d+ s, SIGKILL 1 s later", text), "SIGINT was ignored: SIGKILL"
    assert "AssertionError: one is not two" in text, "a failure before the cut is kept, though pytest never finished"
    assert "evidence incomplete: no readable pytest report" in text
    grandchild = (evidence.prepared / "image-classifier" / "tests" / "grandchild.pid").read_text()
    state = Path(f"/proc/{grandchild}/stat")
    assert not state.exists() or state.read_text().split(") ")[1][0] == "Z", "what the hung test started is dead"
    for n, step in enumerate(STEPS[2:5], start=3):
        assert f"step {n} {step}: passed after" in summary
    fsdp = evidence.text("6-fsdp")
    assert fsdp.count("evidence complete: 1 selected, 1 passed") == 2, "both tasks' FSDP test, each alone"


def test_at_most_8_files_come_back_no_more_than_2_folders_down_each_headed_by_the_gpu_and_versions(
    evidence: Evidence,
) -> None:
    assert len(evidence.files) <= 8 and all(len(f.parent.parts) <= 2 for f in evidence.files), evidence.files
    assert sorted(f.parent.name for f in evidence.files) == ["benchmarks"] * 2 + ["gpu-evidence"] * 5
    for f in evidence.files:
        head = (evidence.out / f).read_text()
        assert head.startswith("# scripts/gpu_evidence.sh --budget 900 --box image-tests=15"), f
        assert "# gpu: Fake GPU 80GB, 000.00, 81559 MiB" in head and "| torch " in head and "| lightning " in head
        assert "| CUDA " in head and "prepared: template commit 0000000" in head, f
    bench = evidence.text("3-image-bench")
    assert "bench.py --only bf16+cl+compile --warmup 15 --steps 50 --rounds 2 --json" in bench
    assert '"lightning_over_plain": 0.995' in bench, "bench.py's JSON comes back inside its step's file"


def test_a_run_with_a_skip_is_incomplete_and_the_summary_gives_each_target_its_figure(evidence: Evidence) -> None:
    assert evidence.result.returncode == 1
    lm = evidence.text("2-lm-tests")
    assert "evidence incomplete: 2 selected, 1 passed, 0 failed, 0 errors, 1 skipped" in lm
    assert "SKIPPED: tests.test_gpu::test_decoding: needs TorchCodec" in lm
    summary = evidence.text("summary")
    assert "ResNet-50 224, bf16+channels_last+compile: Lightning 5,300 img/s, plain 5,327 img/s, MFU 40.0%" in summary
    assert "Lightning/plain 0.995 over 2 interleaved round(s) (0.995, 0.995): target >= 0.99 met" in summary
    assert "GPT-2 124M, context 1024, bf16+compile: Lightning 900,000 tokens/s" in summary
    assert "Lightning/plain 0.970 over 2 interleaved round(s) (0.970, 0.970): target >= 0.98 NOT met" in summary
    assert "largest probability difference 0.0123: target < 0.05 met" in summary
    last = summary.rstrip().splitlines()[-1]
    assert last.startswith("evidence incomplete: not passed: image-tests (timed out) lm-tests (incomplete);"), last
    assert "wheels installed for this run: language-model/dist/fake_engine-1.0-py3-none-any.whl wheels/" in summary


def test_prepare_bakes_both_tasks_lists_their_gpu_test_files_and_fetches_the_wheels(tmp_path: Path) -> None:
    index = tmp_path / "index"
    wheel(index, "torchcodec", "0.17.0", "cp312-cp312-manylinux_2_28_x86_64")
    prepared = tmp_path / "carry"
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index), "PYTHON": sys.executable}
    result = run("bash", SCRIPT, "--prepare", prepared, cwd=TEMPLATE, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1].startswith(f"prepared {prepared}: ")
    assert (prepared / "image-classifier" / "predict.py").is_file()
    assert (prepared / "language-model" / "generate.py").is_file()
    image = (prepared / "gpu-tests-image-classifier.txt").read_text().split()
    assert "tests/image_classification/gpu/test_gpu_predict.py" in image, image
    assert "tests/image_classification/test_sweep.py" not in image, (
        "only files that hold GPU tests: this imports optuna"
    )
    lm = (prepared / "gpu-tests-language-model.txt").read_text().split()
    assert lm == ["tests/language_model/test_gpu_language_model.py"]
    wheels = [w.name for w in (prepared / "wheels").iterdir()]
    assert wheels == ["torchcodec-0.17.0-cp312-cp312-manylinux_2_28_x86_64.whl"]
    assert "template commit " in (prepared / "PREPARED.txt").read_text()
    assert not list(prepared.rglob("__pycache__")), "collecting wrote no bytecode into what travels"


def test_prepare_refuses_a_folder_too_big_to_travel_and_leaves_nothing(tmp_path: Path) -> None:
    index = tmp_path / "index"
    wheel(index, "torchcodec", "0.17.0", "cp312-cp312-manylinux_2_28_x86_64", payload=os.urandom(65 * 2**20))
    prepared = tmp_path / "carry"
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index), "PYTHON": sys.executable}
    result = run("bash", SCRIPT, "--prepare", prepared, cwd=TEMPLATE, env=env)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: PREPARED: {prepared} would hold 65.0 MiB, which with this working tree (")
    assert line.endswith(" MiB) is over the 64 MiB a device call carries; carry fewer or smaller wheels")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"], "no folder, no half-made one beside it"


def test_without_a_gpu_nothing_is_recorded(tmp_path: Path) -> None:
    prepared = fake_prepared(tmp_path / "prepared")
    args = ["--budget", "60", "--out", tmp_path / "out", prepared]
    result = run("bash", SCRIPT, *args, cwd=TEMPLATE, env={"PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: torch sees no CUDA GPU here; nothing recorded: this script records GPU results only where a "
        + "GPU ran them"
    ]
    assert not (tmp_path / "out").exists()


USAGE = "usage: scripts/gpu_evidence.sh --budget SECONDS [--out DIR] [--workers N] [--box STEP=SECONDS]... [PREPARED]"
USAGE += " | --prepare [--python-version X.Y] [PREPARED]"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "9m"], "error: --budget: '9m' is not a whole number of seconds"),
        (["--budget=540", "--box", "bench=60"], f"error: --box: 'bench' is not one of {' '.join(STEPS)}"),
        (["--budget", "540", "--box"], "error: --box: needs a value; " + USAGE),
        (["--verbose"], "error: unknown option --verbose; " + USAGE),
        ([], "error: --budget: needed, in seconds (540 for a 9-minute call); " + USAGE),
        (["--prepare", "--budget", "540"], "error: --budget: runs the steps on a GPU; --prepare only prepares"),
        (["--budget", "540", "--python-version", "3.12"], "error: --python-version: for --prepare only"),
    ],
)
def test_bad_options_are_refused_in_one_line(args: list[str], message: str) -> None:
    result = run("bash", SCRIPT, *args, cwd=TEMPLATE)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [message]


def test_a_folder_not_made_by_prepare_is_refused_in_one_line(tmp_path: Path) -> None:
    result = run("bash", SCRIPT, "--budget", "540", tmp_path, cwd=TEMPLATE)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: PREPARED: {tmp_path} is not a folder made by --prepare (PREPARED.txt, image-classifier/); make it"
        + f" with scripts/gpu_evidence.sh --prepare {tmp_path} where cookiecutter is installed"
    ]


def test_prepare_without_cookiecutter_is_refused_in_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "cookiecutter.py").write_text("raise ImportError('cookiecutter is not installed here')\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{blocked}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    result = run("bash", SCRIPT, "--prepare", tmp_path / "carry", cwd=TEMPLATE, env={"PYTHON": str(python)})
    assert result.returncode == 2 and not (tmp_path / "carry").exists()
    assert result.stderr.strip().splitlines() == [
        f"error: {python} lacks one of cookiecutter, pip, pytest: --prepare runs where the template's tests run"
    ]


VERDICT = TEMPLATE / "scripts" / "pytest_verdict.py"
SUITES = {  # test files whose real pytest reports the verdict reads
    "passes": "import pytest\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n\n@pytest.mark.gpu\ndef test_b():\n    pass\n",
    "skips": "import pytest\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n\n"
    "@pytest.mark.gpu\n@pytest.mark.skipif(True, reason='needs TorchCodec')\ndef test_b():\n    pass\n",
    "fails": "import pytest\n\n@pytest.mark.gpu\ndef test_a():\n    assert 1 == 2, 'one is not two'\n",
    "breaks": "import pytest\nimport no_such_module\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n",
    "selects nothing": "def test_on_cpu():\n    pass\n",
    "interrupted": "import os, signal\nimport pytest\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n\n@pytest.mark.gpu\n"
    "def test_b():\n    os.kill(os.getpid(), signal.SIGINT)  # as at a time box's end\n\n@pytest.mark.gpu\n"
    "def test_c():\n    pass\n",
}
MUST_PASS = "; every selected test must pass, none may skip"


def pytest_report(folder: Path, suite: str) -> Path:
    """The --junitxml report of `pytest -m gpu` on one of SUITES, as the evidence script runs it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(MARKERS)
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
        (
            "interrupted",
            [
                "evidence incomplete: interrupted, 2 in the report, 1 passed, 0 failed, 0 errors, 0 skipped, "
                + "1 interrupted; the tests it never reached are not counted",
                "  INTERRUPTED: a test: pytest was interrupted while it ran",
            ],
        ),
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
