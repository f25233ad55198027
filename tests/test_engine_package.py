"""The engine is a package of its own: one wheel, the same bytes from every build, that a bake installs by a
hash-checked file reference (engine_source=bundled) or from the team's own index (engine_source=index), and that a
team can eject into its project."""

from __future__ import annotations

import hashlib
import re
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from conftest import ENGINE, bake, pip, run, venv

sys.path.insert(0, str(ENGINE / "_build"))
import wheel_backend  # the engine's build backend: what pip, uv and the post-gen hook call

VERSION = tomllib.loads((ENGINE / "pyproject.toml").read_text())["project"]["version"]
WHEEL = f"lightning_gpu_engine-{VERSION}-py3-none-any.whl"


def installed_engine(python: Path) -> str:
    """Where the environment imports the engine from, and its version, as the engine answers."""
    code = "import importlib.metadata as m, lightning_gpu_engine as e; print(m.version('lightning-gpu-engine'), e.__file__)"
    done = run(python, "-c", code, cwd=Path("/"), env={"PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_every_build_of_the_engine_gives_the_same_wheel_with_the_whole_package(tmp_path: Path) -> None:
    first = wheel_backend.build(ENGINE, tmp_path / "a")
    assert first.name == WHEEL
    assert first.read_bytes() == wheel_backend.build(ENGINE, tmp_path / "b").read_bytes()
    sources = {p.relative_to(ENGINE / "src").as_posix() for p in (ENGINE / "src").rglob("*.py")}
    sources = {s for s in sources if "__pycache__" not in s}
    with zipfile.ZipFile(first) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"lightning_gpu_engine-{VERSION}.dist-info/METADATA").decode()
    assert sources <= names and any(n.startswith("lightning_gpu_engine/docs/") for n in names)
    declared = tomllib.loads((ENGINE / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if "extra ==" not in line and line.startswith("Requires-Dist: ")
    ] == declared


def test_a_bake_pins_the_engine_wheel_it_carries_by_its_hash(tmp_path: Path) -> None:
    project = bake(tmp_path)
    carried = project / "wheels" / WHEEL
    assert carried.read_bytes() == wheel_backend.build(ENGINE, tmp_path / "built").read_bytes()
    dependencies = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = next(d for d in dependencies if d.startswith("lightning-gpu-engine"))
    assert (
        pinned
        == f"lightning-gpu-engine @ {{root:uri}}/wheels/{WHEEL}#sha256={hashlib.sha256(carried.read_bytes()).hexdigest()}"
    )


def test_pip_installs_the_engine_from_the_bundled_wheel_and_refuses_a_substitute(tmp_path: Path) -> None:
    project = bake(tmp_path / "bake")
    python = venv(tmp_path / "venv")
    pip(python, "install", "-q", "--no-index", "--no-build-isolation", "-e", project, cwd=tmp_path)
    version, location = installed_engine(python).split()
    assert version == VERSION and location.startswith(str(tmp_path / "venv")), location
    # A same-named wheel with other contents, as an index or a tampered copy would hand over: pip refuses it
    other = tmp_path / "other"
    substitute = wheel_backend.build(ENGINE, tmp_path / "substitute")
    with zipfile.ZipFile(substitute, "a") as wheel:
        wheel.writestr("lightning_gpu_engine/planted.py", "print('not the engine this project pinned')\n")
    project.rename(other)
    substitute.replace(other / "wheels" / WHEEL)
    refused = run(python, "-m", "pip", "install", "--no-index", "--no-build-isolation", "-e", other, cwd=tmp_path)
    assert refused.returncode != 0 and "HASHES" in refused.stdout + refused.stderr, refused.stderr[-2000:]


def test_an_index_bake_resolves_the_engine_from_a_local_folder_index(tmp_path: Path) -> None:
    project = bake(tmp_path / "bake", engine_source="index")
    series = ".".join(VERSION.split(".")[:2])
    assert f'"lightning-gpu-engine~={series}"' in (project / "pyproject.toml").read_text()
    assert not (project / "wheels").exists()
    python = venv(tmp_path / "venv")
    offline = run(python, "-m", "pip", "install", "--no-index", "--no-build-isolation", "-e", project, cwd=tmp_path)
    assert offline.returncode != 0 and "lightning-gpu-engine" in offline.stderr, "the engine came from elsewhere"
    index = tmp_path / "index"  # what the README's publish command uploads, laid out as a folder index
    wheel_backend.build(ENGINE, index)
    pip(
        python,
        "install",
        "-q",
        "--no-index",
        "--find-links",
        index,
        "--no-build-isolation",
        "-e",
        project,
        cwd=tmp_path,
    )
    version, location = installed_engine(python).split()
    assert version == VERSION and location.startswith(str(tmp_path / "venv"))


# guarded (.ci/guarded.toml): the image task's conformance suite, run on the ejected project. Not measured yet: an estimate
@pytest.mark.minutes(3)
def test_eject_copies_the_engine_into_the_project_which_then_trains_without_the_package(
    tmp_path: Path, time_limit: float
) -> None:
    project = bake(tmp_path / "bake")
    python = venv(tmp_path / "venv")
    pip(python, "install", "-q", "--no-index", "--no-build-isolation", "-e", project, cwd=tmp_path)
    ejected = run(python, "-m", "lightning_gpu_engine", "eject", "--project", project, cwd=tmp_path)
    assert ejected.returncode == 0, ejected.stderr
    pip(python, "uninstall", "-q", "-y", "lightning-gpu-engine", cwd=tmp_path)
    gone = run(python, "-c", "import lightning_gpu_engine", cwd=tmp_path, env={"PYTHONPATH": ""})
    assert gone.returncode != 0, "the package is still installed"
    package = project / "src" / "image_classifier"
    assert (package / "engine" / "__init__.py").is_file() and not (package / "engine.py").exists()
    leftovers = [str(p.relative_to(project)) for p in project.rglob("*.py") if "lightning_gpu_engine" in p.read_text()]
    assert leftovers == []
    pyproject = (project / "pyproject.toml").read_text()
    assert "lightning-gpu-engine" not in pyproject and not (project / "wheels" / WHEEL).exists()
    assert re.search(r'(?m)^    "litdata>=', pyproject), "the engine's own needs became the project's"
    # committed as a team commits, the ejected engine is whole in a fresh clone (the .gitignore ignores no part of it)
    git = ["git", "-c", "user.name=team", "-c", "user.email=team@example.com"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "eject"]):
        assert run(*git, *step, cwd=project).returncode == 0
    assert run("git", "clone", "-q", project, tmp_path / "clone", cwd=tmp_path).returncode == 0
    engine_files = {p.relative_to(package) for p in (package / "engine").rglob("*") if p.is_file()}
    cloned = tmp_path / "clone" / "src" / "image_classifier"
    assert {p for p in engine_files if "__pycache__" not in p.parts} <= {
        p.relative_to(cloned) for p in (cloned / "engine").rglob("*")
    }
    pip(python, "install", "-q", "--no-index", "--no-build-isolation", "-e", project, cwd=tmp_path)
    suite = run(
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-x",
        "-k",  # a run and a stop-and-resume: what ties the copied engine together; the features are the suite's to prove
        "tiny_run or file-1-rank or test_config",
        "tests/image_classification/test_conformance.py",
        "tests/image_classification/test_config.py",
        cwd=project,
        timeout=time_limit,
        env={"PYTHONPATH": ""},
    )
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]
