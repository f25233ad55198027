"""A machine without a GPU gets PyTorch's CPU wheels by the README's word: pip's `--index-url`, and the accelerator
extras it gives for `pyproject.toml` (`uv sync --extra cpu` or `--extra cu128`), take torch from PyTorch's index for
that build, not PyPI's CUDA build (5.7 GB of nvidia-* packages on a laptop, without a word). Proven offline, in seconds: folders in the simple-index layout stand in for
PyTorch's indexes and for PyPI, each holding tiny torch and torchvision wheels built here, at versions no real index
has, so what the resolver picks says which folder it read. Like PyTorch's, the accelerator folders publish no upload
times; the PyPI stand-in does, as PyPI does."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import BIN, bake, run

UV = BIN / "uv"
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
PYTORCH = "https://download.pytorch.org/whl/"
BUILDS = {"cpu": "+cpu", "cu128": "+cu128", "pypi": ""}  # each stand-in index, and its wheels' local version label
VERSIONS = {"torch": "2.99.0", "torchvision": "0.99.0"}


def wheel(folder: Path, name: str, version: str) -> Path:
    """A pure-Python wheel of `name` at `version`, whose RECORD holds each file's hash as pip checks it."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"__version__ = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    digest = {p: base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=") for p, t in files.items()}
    record = "".join(f"{p},sha256={digest[p].decode()},{len(t)}\n" for p, t in files.items())
    files[f"{dist}/RECORD"] = record + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, text in files.items():
            archive.writestr(name_in, text)
    return path


def simple_index(root: Path, label: str, uploaded: bool) -> Path:
    """root/<name>/index.html for each package, as PEP 503 lays an index out; `uploaded`: each link carries its upload
    time (the attribute uv reads from HTML indexes), a year-old one."""
    (root / "files").mkdir(parents=True)
    for name, version in VERSIONS.items():
        built = wheel(root / "files", name, version + label)
        sha = hashlib.sha256(built.read_bytes()).hexdigest()
        when = ' data-upload-time="2025-01-01T00:00:00Z"' if uploaded else ""
        (root / name).mkdir()
        (root / name / "index.html").write_text(
            f'<a{when} href="../files/{built.name}#sha256={sha}">{built.name}</a>\n'
        )
    return root


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("indexes")
    return {build: simple_index(root / build, label, uploaded=build == "pypi") for build, label in BUILDS.items()}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bake(tmp_path_factory.mktemp("bake"), python_version=HERE)  # the image task: torch and torchvision


def toml(value: Any) -> str:
    """`value` as TOML: strings, booleans, lists and tables inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return "{ " + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + " }"


def probe(folder: Path, pyproject: dict[str, Any], indexes: dict[str, Path], uv_table: dict[str, Any]) -> Path:
    """A project of the bake's torch and torchvision alone, with its accelerator extras and its [tool.uv] settings
    (`uv_table`), PyTorch's index URLs pointing at the stand-ins and PyPI replaced by its own."""
    meta = pyproject["project"]
    torches = [r for r in meta["dependencies"] if re.match(r"torch(vision)?[<>=~! ]", r)]
    extras = {extra: meta["optional-dependencies"][extra] for extra in ("cpu", "cu128")}
    sources = {name: pyproject["tool"]["uv"]["sources"][name] for name in VERSIONS}
    lines = ["[project]", 'name = "probe"', 'version = "0"', f'requires-python = ">={HERE}"']
    lines += [f"dependencies = {toml(torches)}", "", "[project.optional-dependencies]"]
    lines += [f"{extra} = {toml(reqs)}" for extra, reqs in extras.items()]
    settings = {key: value for key, value in uv_table.items() if key not in ("index", "sources")}
    lines += ["", "[tool.uv]", *(f"{key} = {toml(value)}" for key, value in settings.items())]
    lines += ["", "[tool.uv.sources]", *(f"{name} = {toml(value)}" for name, value in sources.items())]
    for index in pyproject["tool"]["uv"]["index"]:
        url = index["url"].rstrip("/")
        assert url.startswith(PYTORCH) and url.removeprefix(PYTORCH) in indexes, url
        local = {**index, "url": indexes[url.removeprefix(PYTORCH)].as_uri()}
        lines += ["", "[[tool.uv.index]]", *(f"{key} = {toml(value)}" for key, value in local.items())]
    lines += ["", "[[tool.uv.index]]", 'name = "pypi"', f'url = "{indexes["pypi"].as_uri()}"', "default = true"]
    folder.mkdir()
    (folder / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return folder


def readme_lines(project: Path) -> dict[str, Any]:
    """The TOML the README gives under "PyTorch for one accelerator", to add to `pyproject.toml`."""
    readme = (project / "README.md").read_text()
    found = re.search(r"```toml\n(.*?)```", readme[readme.index("**PyTorch for one accelerator.**") :], re.DOTALL)
    assert found, "the README gives no TOML for the accelerator extras"
    return tomllib.loads(found.group(1))


def added(tables: dict[str, Any], lines: dict[str, Any]) -> dict[str, Any]:
    """`lines` added to the tables of the same names, as the README says to: a key already there would clash."""
    out = copy.deepcopy(tables)
    for key, value in lines.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = added(out[key], value)
        else:
            assert key not in out, f"the README's {key} is in pyproject.toml already"
            out[key] = value
    return out


def locked(folder: Path) -> dict[str, list[tuple[str, str]]]:
    """`uv lock --offline` of the probe: for each extra ("" for none), what it installs ("torch 2.99.0+cpu") and the
    index folder each comes from."""
    done = run(UV, "--no-python-downloads", "lock", "--offline", "--python", sys.executable, cwd=folder, timeout=120)
    assert done.returncode == 0, done.stderr
    lock = tomllib.loads((folder / "uv.lock").read_text())
    [root] = [p for p in lock["package"] if p["name"] == "probe"]
    chosen: dict[str, list[tuple[str, str]]] = {"": []}
    for dep in root["dependencies"]:
        if not dep.get("marker", "").startswith("extra =="):  # not an extra's alone
            chosen[""].append((f"{dep['name']} {dep['version']}", dep["source"]["registry"]))
    for extra, deps in root["optional-dependencies"].items():
        chosen[extra] = sorted((f"{d['name']} {d['version']}", d["source"]["registry"]) for d in deps)
    return chosen


@pytest.mark.skipif(not UV.exists(), reason="uv is not installed beside this Python")
def test_the_readmes_uv_extras_take_each_builds_pytorch_from_its_own_index_under_the_cooldown(
    project: Path, indexes: dict[str, Path], tmp_path: Path
) -> None:
    pyproject = added(tomllib.loads((project / "pyproject.toml").read_text()), readme_lines(project))
    uv_table = pyproject["tool"]["uv"]
    assert uv_table["exclude-newer"] == "7 days", "the default bake keeps a cooldown: the case to prove"
    chosen = locked(probe(tmp_path / "probe", pyproject, indexes, uv_table))
    for extra in ("cpu", "cu128"):
        want = [(f"{name} {version}+{extra}", str(indexes[extra])) for name, version in VERSIONS.items()]
        assert chosen[extra] == want, extra
    assert sorted(chosen[""]) == [(f"{n} {v}", str(indexes["pypi"])) for n, v in VERSIONS.items()], "no extra: PyPI's"
    # Without torch's and torchvision's exemption, the cooldown refuses every wheel of an index without upload times
    strict = {key: value for key, value in uv_table.items() if key != "exclude-newer-package"}
    folder = probe(tmp_path / "strict", pyproject, indexes, strict)
    refused = run(UV, "--no-python-downloads", "lock", "--offline", "--python", sys.executable, cwd=folder)
    assert refused.returncode != 0 and "exclude-newer" in refused.stderr, refused.stderr


def test_the_readmes_pip_command_takes_the_cpu_wheels_from_pytorchs_index(
    project: Path, indexes: dict[str, Path], tmp_path: Path
) -> None:
    """The command as the README prints it, PyTorch's URL pointing at the stand-in; pip on its own, none of this
    machine's pip configuration (its extra indexes and constraints) read."""
    readme = (project / "README.md").read_text()
    [command] = set(re.findall(r"`(pip install torch[^`]*--index-url https://download\.pytorch\.org/whl/cpu)`", readme))
    args = command.split()[2:]
    args[args.index("--index-url") + 1] = indexes["cpu"].as_uri()
    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed", "--report", report]
    done = run(*pip, *args, cwd=tmp_path, env={"PIP_CONFIG_FILE": os.devnull}, timeout=120)
    assert done.returncode == 0, done.stderr
    installs = json.loads(report.read_text())["install"]
    picked = sorted((i["metadata"]["name"], i["metadata"]["version"], i["download_info"]["url"]) for i in installs)
    files = indexes["cpu"] / "files"
    assert picked == [(n, f"{v}+cpu", (files / f"{n}-{v}+cpu-py3-none-any.whl").as_uri()) for n, v in VERSIONS.items()]
