"""`pip install .` (not editable) puts each root script on PATH as <project>-<script>: it runs from any directory, with
the same flags and exit codes as the script of a clone.

What is proven here is the install: the wheel holds every module of the package, and each installed command answers
--help and a bad flag, and does one tiny run from the filesystem's root. What the runs compute is the suites' to prove
(through the same functions, from a clone): here each tiny run only has to end well and leave its output.
"""

from __future__ import annotations

import site
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import bake, run
from PIL import Image

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
IMAGE_TINY = ["--accelerator=cpu", "--precision=32-true", "--image-size=16", "--batch-size=8", "--train-samples=32"]
IMAGE_TINY += ["--num-workers=0", "--logger=csv", "--max-steps=2"]
LM_TINY = ["--accelerator=cpu", "--precision=32-true", "--model=tiny", "--context=32", "--batch-size=8"]
LM_TINY += ["--train-tokens=20000", "--num-workers=0", "--logger=csv", "--max-steps=2"]
CLEAN_ENV = {"PYTHONPATH": ""}  # nothing of the bake importable but what was installed
CHECKPOINT = "run/checkpoints/last.ckpt"  # under the test's folder, written by the tiny run of train
TRIAL = "sweep/trial-0000/validation.jsonl"  # the sweep's one trial validated: it ran to its end
# Each command's one tiny run, after train's and in this order: its arguments (given the test's folder), and the file
# or folder it must leave there
Runs = dict[str, tuple[Callable[[Path], list[str]], str]]
IMAGE_RUNS: Runs = {
    "train": (lambda tmp: [*IMAGE_TINY, f"--output-dir={tmp / 'run'}"], CHECKPOINT),
    "predict": (lambda tmp: [f"--checkpoint={tmp / CHECKPOINT}", str(red(tmp)), f"--output={tmp / 'p.csv'}"], "p.csv"),
    "export": (lambda tmp: [f"--checkpoint={tmp / CHECKPOINT}", "--format=torch-export", f"--output={tmp / 'm.pt2'}"], "m.pt2"),
    "sweep": (lambda tmp: [f"--space={space(tmp)}", "--trials=1", f"--output-dir={tmp / 'sweep'}", *IMAGE_TINY, "--val-every=2"], TRIAL),
    "bench": (
        lambda tmp: ["--device=cpu", "--image-size=16", "--batch-size=8", "--warmup=1", "--steps=2", "--rounds=1", "--only=fp32", f"--json={tmp / 'b.json'}"],
        "b.json",
    ),
}  # fmt: skip
LM_RUNS: Runs = {
    "train": (lambda tmp: [*LM_TINY, f"--output-dir={tmp / 'run'}"], CHECKPOINT),
    "generate": (lambda tmp: [f"--checkpoint={tmp / CHECKPOINT}", "--prompt=ab", "--max-new-tokens=4", "--accelerator=cpu", f"--output={tmp / 'g.jsonl'}"], "g.jsonl"),
    "export": (lambda tmp: [f"--checkpoint={tmp / CHECKPOINT}", f"--output={tmp / 'hf'}"], "hf/model.safetensors"),
    "train-tokenizer": (lambda tmp: [f"--data-dir={texts(tmp)}", "--vocab-size=300", f"--output={tmp / 't.json'}"], "t.json"),
    "sweep": (lambda tmp: [f"--space={space(tmp)}", "--trials=1", f"--output-dir={tmp / 'sweep'}", *LM_TINY, "--val-every=2"], TRIAL),
    "bench": (
        lambda tmp: ["--device=cpu", "--context=16", "--batch-size=4", "--warmup=1", "--steps=2", "--rounds=1", "--only=fp32", f"--json={tmp / 'b.json'}"],
        "b.json",
    ),
}  # fmt: skip


def red(tmp: Path) -> Path:
    Image.new("RGB", (20, 20), (200, 30, 30)).save(tmp / "red.png")
    return tmp / "red.png"


def space(tmp: Path) -> Path:
    (tmp / "space.yaml").write_text("lr: {low: 1.0e-3, high: 1.0e-2, log: true}\n")
    return tmp / "space.yaml"


def texts(tmp: Path) -> Path:
    (tmp / "texts").mkdir()
    (tmp / "texts" / "a.txt").write_text("the cat sat on the mat. " * 200)
    return tmp / "texts"


def install(tmp_path: Path, task: str) -> tuple[Path, Path]:
    """A fresh virtual environment with the bake installed as a wheel: (its bin/ folder, the bake). It sees this
    environment's packages (torch, lightning, ...) through a .pth file, so nothing is downloaded."""
    project = bake(tmp_path / "bake", task=task, python_version=HERE)
    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path).returncode == 0
    (next(venv.glob("lib/python*/site-packages")) / "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = venv / "bin" / "python"
    done = run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", project, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    engine = run(python, "-m", "pip", "install", "-q", "--no-deps", *(project / "wheels").glob("*.whl"), cwd=tmp_path)
    assert engine.returncode == 0, engine.stderr  # the engine's wheel, as its reference in pyproject.toml installs it
    installed = next(venv.glob("lib/python*/site-packages"))
    assert not list(installed.glob("__editable__*")), "a wheel, not a link back"
    package = next(p for p in (project / "src").iterdir() if p.is_dir() and not p.name.endswith(".egg-info"))
    missing = [str(p.relative_to(project / "src")) for p in package.rglob("*.py")]
    assert [m for m in missing if not (installed / m).is_file()] == [], "modules the wheel left out"
    return venv / "bin", project


def scripts(project: Path) -> dict[str, str]:
    """Console script -> the root script it stands for (`image-classifier-train` -> `train.py`)."""
    names = tomllib.loads((project / "pyproject.toml").read_text())["project"]["scripts"]
    slug = project.name
    return {name: name.removeprefix(f"{slug}-").replace("-", "_") + ".py" for name in names}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "runs"),
    [
        pytest.param("image-classification", IMAGE_RUNS, id="image-classifier", marks=pytest.mark.minutes(0.9)),
        pytest.param("language-model", LM_RUNS, id="language-model", marks=pytest.mark.minutes(0.7)),
    ],
)
def test_every_command_runs_from_anywhere_after_a_wheel_install(task: str, runs: Runs, tmp_path: Path) -> None:
    bin_dir, project = install(tmp_path, task)
    slug = project.name
    assert set(scripts(project)) == {f"{slug}-{name}" for name in runs}, "a command without its tiny run here"
    for command, script in scripts(project).items():
        assert (project / script).is_file(), f"{command} stands for {script}, which a clone has"
        helped = run(bin_dir / command, "--help", cwd=Path("/"), env=CLEAN_ENV)
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: {command} "), helped.stdout[:300]
        refused = run(bin_dir / command, "--no-such-flag", cwd=Path("/"), env=CLEAN_ENV)
        assert (refused.returncode, refused.stderr.count("\n")) == (2, 1), refused.stderr
    for name, (args, leaves) in runs.items():
        done = run(bin_dir / f"{slug}-{name}", *args(tmp_path), cwd=Path("/"), env=CLEAN_ENV)
        assert done.returncode == 0, f"{slug}-{name}: {done.stderr[-3000:]}"
        assert (tmp_path / leaves).exists(), f"{slug}-{name} left no {leaves}:\n{done.stdout[-2000:]}"
