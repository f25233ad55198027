"""The engine's build backend (PEP 517), with no dependencies of its own: a pure-Python wheel that is byte-identical
for the same sources (sorted entries, one fixed timestamp, fixed modes), so the hash a project pins changes only when
the engine does. The template's post-generation hook builds the bundled wheel with `build(ENGINE, out)`, the same
function pip and uv call through `build_wheel`."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile
import tomllib
import zipfile
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1]
STAMP = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: any fixed date keeps wheels identical across builds
SKIP = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def project(root: Path = ENGINE) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_name(root: Path = ENGINE) -> str:
    meta = project(root)
    return f"{_dist(meta['name'])}-{meta['version']}-py3-none-any.whl"


def _metadata(root: Path) -> str:
    meta = project(root)
    lines = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {meta['version']}"]
    lines += [f"Summary: {meta['description']}", f"Requires-Python: {meta['requires-python']}"]
    lines += [f"Requires-Dist: {req}" for req in meta.get("dependencies", [])]
    for extra, reqs in meta.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for req in reqs:
            name, _, marker = req.partition(";")
            marker = f"({marker.strip()}) and " if marker.strip() else ""
            lines.append(f'Requires-Dist: {name.strip()}; {marker}extra == "{extra}"')
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + (root / meta["readme"]).read_text()


def _entry_points(root: Path) -> str:
    scripts = project(root).get("scripts", {})
    return "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items()) if scripts else ""


def _package_files(root: Path) -> list[tuple[str, bytes]]:
    src = root / "src"
    return [
        (path.relative_to(src).as_posix(), path.read_bytes())
        for path in sorted(src.rglob("*"))
        if path.is_file() and not SKIP & set(path.parts) and path.suffix in (".py", ".md", ".typed")
    ]


def _write_wheel(root: Path, out_dir: Path, files: list[tuple[str, bytes]]) -> Path:
    meta = project(root)
    info = f"{_dist(meta['name'])}-{meta['version']}.dist-info"
    files = [*files, (f"{info}/METADATA", _metadata(root).encode())]
    wheel_file = b"Wheel-Version: 1.0\nGenerator: wheel_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files.append((f"{info}/WHEEL", wheel_file))
    if entry_points := _entry_points(root):
        files.append((f"{info}/entry_points.txt", entry_points.encode()))
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files
    )
    files.append((f"{info}/RECORD", (record + f"{info}/RECORD,,\n").encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / wheel_name(root)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files:
            entry = zipfile.ZipInfo(name, STAMP)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
    return path


def build(root: Path, out_dir: Path) -> Path:
    """The engine's wheel, from the engine folder `root`, into `out_dir`; returns its path."""
    return _write_wheel(root, out_dir, _package_files(root))


# PEP 517 and PEP 660 hooks: what pip and uv call (pyproject.toml's build-backend)


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return []


get_requires_for_build_sdist = get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    return build(ENGINE, Path(wheel_directory)).name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    """`pip install -e engine`: a .pth file that puts engine/src on the path, for whoever works on the engine."""
    pth = (f"{_dist(project()['name'])}.pth", (str(ENGINE / "src") + "\n").encode())
    return _write_wheel(ENGINE, Path(wheel_directory), [pth]).name


def build_sdist(sdist_directory, config_settings=None) -> str:
    meta = project()
    base = f"{_dist(meta['name'])}-{meta['version']}"
    out = Path(sdist_directory) / f"{base}.tar.gz"
    members = ["pyproject.toml", meta["readme"], "CHANGELOG.md", "UPGRADING.md", "_build/wheel_backend.py"]
    members += [
        p.relative_to(ENGINE).as_posix() for p in sorted((ENGINE / "src").rglob("*")) if p.is_file() and not SKIP & set(p.parts)
    ]
    entries = [(f"{base}/{name}", (ENGINE / name).read_bytes()) for name in members]
    entries.append((f"{base}/PKG-INFO", _metadata(ENGINE).encode()))
    with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as sdist:
        for name, data in entries:
            entry = tarfile.TarInfo(name)
            entry.size, entry.mode, entry.mtime = len(data), 0o644, 315532800  # 1980-01-01, as in the wheel
            sdist.addfile(entry, io.BytesIO(data))
    return out.name
