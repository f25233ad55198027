"""`pip install .` (not editable) puts each root script on PATH as <project>-<script>: it runs from any directory, with
the same flags and exit codes as the script of a clone."""

from __future__ import annotations

import site
import sys
import tomllib
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
    assert not list(next(venv.glob("lib/python*/site-packages")).glob("__editable__*")), "a wheel, not a link back"
    return venv / "bin", project


def scripts(project: Path) -> dict[str, str]:
    """Console script -> the root script it stands for (`image-classifier-train` -> `train.py`)."""
    names = tomllib.loads((project / "pyproject.toml").read_text())["project"]["scripts"]
    slug = project.name
    return {name: name.removeprefix(f"{slug}-").replace("-", "_") + ".py" for name in names}


def check_help_and_refusals(bin_dir: Path, project: Path) -> None:
    """--help, and a bad flag refused as the root scripts refuse one (their own tests check those): one line, exit 2."""
    for command, script in scripts(project).items():
        assert (project / script).is_file(), f"{command} stands for {script}, which a clone has"
        helped = run(bin_dir / command, "--help", cwd=Path("/"), env=CLEAN_ENV)
        assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stderr
        refused = run(bin_dir / command, "--no-such-flag", cwd=Path("/"), env=CLEAN_ENV)
        assert (refused.returncode, refused.stderr.count("\n")) == (2, 1), refused.stderr


@pytest.mark.slow
@pytest.mark.minutes(2)
def test_image_classifier_commands_run_from_anywhere_after_a_wheel_install(tmp_path: Path) -> None:
    bin_dir, project = install(tmp_path, "image-classification")
    assert set(scripts(project)) == {f"image-classifier-{s}" for s in ("train", "predict", "export", "sweep", "bench")}
    check_help_and_refusals(bin_dir, project)

    def tool(name: str, *args: str | Path) -> str:
        result = run(bin_dir / f"image-classifier-{name}", *args, cwd=Path("/"), env=CLEAN_ENV)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    tool("train", *IMAGE_TINY, f"--output-dir={tmp_path / 'run'}")
    checkpoint = next((tmp_path / "run").rglob("last.ckpt"))
    Image.new("RGB", (20, 20), (200, 30, 30)).save(tmp_path / "red.png")
    tool("predict", f"--checkpoint={checkpoint}", tmp_path / "red.png", f"--output={tmp_path / 'out.csv'}")
    assert "red.png" in (tmp_path / "out.csv").read_text()
    tool("export", f"--checkpoint={checkpoint}", "--format=torch-export", f"--output={tmp_path / 'model.pt2'}")
    assert (tmp_path / "model.pt2").is_file()
    (tmp_path / "space.yaml").write_text("lr: {low: 1.0e-3, high: 1.0e-2, log: true}\n")
    sweep = [f"--space={tmp_path / 'space.yaml'}", "--trials=1", f"--output-dir={tmp_path / 'sweep'}", *IMAGE_TINY]
    tool("sweep", *sweep)
    assert list((tmp_path / "sweep").glob("trial-*"))
    bench = ["--device=cpu", "--model=resnet18", "--image-size=16", "--batch-size=8", "--warmup=1", "--steps=2"]
    tool("bench", *bench, "--rounds=1", "--only=fp32", f"--json={tmp_path / 'bench.json'}")
    assert (tmp_path / "bench.json").is_file()


@pytest.mark.slow
@pytest.mark.minutes(2)
def test_language_model_commands_run_from_anywhere_after_a_wheel_install(tmp_path: Path) -> None:
    bin_dir, project = install(tmp_path, "language-model")
    expected = ("train", "generate", "train-tokenizer", "export", "sweep", "bench")
    assert set(scripts(project)) == {f"language-model-{s}" for s in expected}
    check_help_and_refusals(bin_dir, project)
    trained = run(
        bin_dir / "language-model-train", *LM_TINY, f"--output-dir={tmp_path / 'run'}", cwd=Path("/"), env=CLEAN_ENV
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    checkpoint = next((tmp_path / "run").rglob("last.ckpt"))
    args = [f"--checkpoint={checkpoint}", "--prompt=ab", "--max-new-tokens=4", "--accelerator=cpu"]
    generated = run(bin_dir / "language-model-generate", *args, cwd=Path("/"), env=CLEAN_ENV)
    assert generated.returncode == 0 and "--- sample 1 ---" in generated.stdout, generated.stderr[-3000:]
