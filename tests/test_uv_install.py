"""uv is the first install path of a bake, and every install path holds new releases back for the cooldown's days."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import BIN, bake, run
from packaging.version import Version

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
# uv's own cache (UV_CACHE_DIR, else ~/.cache/uv), as a developer's `uv sync` uses it: the first run on a machine
# downloads torch and its CUDA libraries (about 5.6 GB, half a minute here), later ones link them from the cache.
UV: list[str | Path] = [BIN / "uv", "--no-python-downloads"]
# One tiny CPU step's worth of the image task: synthetic images, no download.
TINY = ["--accelerator=cpu", "--precision=32-true", "--image-size=16", "--batch-size=8", "--train-samples=32"]
TINY += ["--num-workers=0", "--logger=csv"]
needs_uv = pytest.mark.skipif(not (BIN / "uv").exists(), reason="uv is not installed beside this Python")


@needs_uv
@pytest.mark.slow
@pytest.mark.minutes(1)  # half a minute more the first time on a machine: uv downloads torch
def test_a_fresh_bake_installs_with_uv_sync_and_trains(tmp_path: Path) -> None:
    project = bake(tmp_path, python_version=HERE)
    synced = run(*UV, "sync", "--python", sys.executable, cwd=project, timeout=900)
    assert synced.returncode == 0, synced.stderr
    lock = (project / "uv.lock").read_text()
    assert 'exclude-newer-span = "P7D"' in lock, "the lock records the relative cooldown, not a fixed date"
    args = ["python", "train.py", "--max-steps", "2", *TINY, f"--output-dir={tmp_path / 'run'}"]
    trained = run(*UV, "run", "--locked", *args, cwd=project, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert list((tmp_path / "run").rglob("*.ckpt")), trained.stdout[-2000:]
    code = "import importlib.metadata as m; print(m.distribution('lightning-gpu-engine').read_text('direct_url.json'))"
    engine = run(*UV, "run", "--locked", "python", "-c", code, cwd=project)
    assert engine.returncode == 0 and "/wheels/lightning_gpu_engine-" in engine.stdout, engine.stdout + engine.stderr


def probe(folder: Path, uv_table: str, cutoff: str | None) -> Version:
    """Lock a one-dependency project (pyyaml, a dependency of every bake) under the bake's own [tool.uv] settings, its
    exclude-newer set to `cutoff` (None: taken out); return the version of pyyaml that uv picks."""
    if cutoff is None:
        uv_table = re.sub(r"(?m)^exclude-newer = .*\n", "", uv_table)
    else:
        uv_table, count = re.subn(r"(?m)^exclude-newer = .*$", f'exclude-newer = "{cutoff}"', uv_table)
        assert count == 1, uv_table
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "probe"\nversion = "0"\nrequires-python = ">={HERE}"\ndependencies = ["pyyaml"]\n\n{uv_table}'
    )
    result = run(*UV, "lock", "--python", sys.executable, cwd=folder, timeout=300)
    assert result.returncode == 0, result.stderr
    lock = tomllib.loads((folder / "uv.lock").read_text())
    return Version(next(p["version"] for p in lock["package"] if p["name"] == "pyyaml"))


@needs_uv
def test_the_cooldown_holds_back_releases_newer_than_its_cutoff(tmp_path: Path) -> None:
    text = (bake(tmp_path / "bake", python_version=HERE) / "pyproject.toml").read_text()
    uv_table = re.search(r"(?ms)^\[tool\.uv\]\n.*?(?=^\[)", text).group(0)  # type: ignore[union-attr]
    assert tomllib.loads(uv_table)["tool"]["uv"]["exclude-newer"] == "7 days"
    held_back = probe(tmp_path / "cutoff", uv_table, "2021-06-01T00:00:00Z")
    newest = probe(tmp_path / "none", uv_table, None)
    assert held_back < newest, f"the cutoff changed nothing: {held_back} both times"


def test_a_cooldown_of_zero_days_turns_it_off_everywhere_and_other_days_reach_every_tool(tmp_path: Path) -> None:
    off = bake(tmp_path / "off", cooldown_days="0", dependency_bot="renovate")
    assert "exclude-newer" not in tomllib.loads((off / "pyproject.toml").read_text())["tool"]["uv"]
    assert "minimumReleaseAge" not in (off / "renovate.json").read_text()
    assert "PIP_UPLOADED_PRIOR_TO" not in (off / "Dockerfile").read_text()
    assert "exclude-newer" not in (off / ".github" / "workflows" / "template-update.yml").read_text()
    on = bake(tmp_path / "on", cooldown_days="30", dependency_bot="dependabot")
    assert tomllib.loads((on / "pyproject.toml").read_text())["tool"]["uv"]["exclude-newer"] == "30 days"
    assert "default-days: 30" in (on / ".github" / "dependabot.yml").read_text()
    assert re.search(r"(?m)^ENV PIP_UPLOADED_PRIOR_TO=P30D$", (on / "Dockerfile").read_text())
    assert '--exclude-newer "30 days"' in (on / ".github" / "workflows" / "template-update.yml").read_text()
