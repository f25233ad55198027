"""`python -m lightning_gpu_engine eject`: the engine copied into the project's package, its imports rewritten, the
dependency dropped; all or nothing. Standard library only: it runs where torch is broken too.

Everything is read and rewritten in memory first, so an unreadable file refuses the eject before anything is written.
The engine's copy is then written beside its place and renamed into it, the rewritten files likewise, and a failure
on the way puts back every byte it had replaced: the project is as it was, and a second eject is not refused.

Layer 0: imports no other part.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tokenize
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
DIST = "lightning-gpu-engine"
STAGED = ".ejecting"  # the suffix of what is written beside its place before it is renamed into it


class EjectError(Exception):
    """One line for the user; nothing was changed."""


def project_package(project: Path) -> str:
    packages = [p.parent.name for p in (project / "src").glob("*/__init__.py")]
    if len(packages) != 1:
        raise EjectError(f"--project: {project} has no single package under src/ (found {packages or 'none'})")
    return packages[0]


def listed(pyproject: str, requirement: str) -> bool:
    """Whether the project already depends on the requirement's package (at whatever version it asks)."""
    name = re.split(r"[\s<>=!~\[;@]", requirement, maxsplit=1)[0]
    return re.search(rf'(?m)^\s*"{re.escape(name)}[\s<>=!~\[;@"]', pyproject) is not None


def without_engine(pyproject: str, needs: list[str]) -> str:
    """pyproject.toml with the engine's requirement, its comment and its uv source gone, and the engine's own needs
    added, so that the project installs what the ejected code imports."""
    out: list[str] = []
    for line in pyproject.splitlines():
        if re.match(r'\s*"lightning-gpu-engine[\s@~=<>!\[]', line) or line.startswith("lightning-gpu-engine ="):
            while out and out[-1].lstrip().startswith("#"):  # the requirement's own comment
                out.pop()
            if line.startswith("lightning-gpu-engine =") and out and out[-1] == "[tool.uv.sources]":
                out.pop()
            continue
        out.append(line)
        if line.strip() == "dependencies = [":
            out.append("    # What the engine imports, since `python -m lightning_gpu_engine eject` put it in src/")
            out += [f'    "{need}",' for need in needs]
    return "\n".join(out) + "\n"


def rewritten(path: Path, package: str) -> bytes | None:
    """The file with its engine imports renamed, in the encoding Python reads it in (PEP 263); None if unchanged."""
    data = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as err:
        raise EjectError(f"--project: {path} is not readable as Python reads it ({err}); fix it, then eject") from None
    if "lightning_gpu_engine" not in text:
        return None
    return text.replace("lightning_gpu_engine", f"{package}.engine").encode(encoding)


def engine_files(package: str) -> dict[Path, bytes]:
    """The engine's files as they will be in the project, by path below it: its imports renamed."""
    files = {}
    for path in sorted(HERE.rglob("*")):
        # the commands stay behind: an ejected engine is not ejected again
        if path.is_file() and "__pycache__" not in path.parts and path.name not in ("__main__.py", "eject.py"):
            data = path.read_bytes()
            if path.suffix == ".py":
                data = data.decode().replace("lightning_gpu_engine", f"{package}.engine").encode()
            files[path.relative_to(HERE)] = data
    return files


def plan(project: Path) -> tuple[Path, dict[Path, bytes], dict[Path, bytes | None], int]:
    """Where the engine goes, its files, and each project file's new bytes (None: removed), all read before anything
    is written."""
    pyproject = project / "pyproject.toml"
    if not pyproject.is_file() or DIST not in pyproject.read_text():
        raise EjectError(f"--project: {project} is not a project that depends on {DIST}")
    package = project_package(project)
    target = project / "src" / package / "engine"
    if target.exists():
        raise EjectError(f"--project: {target} exists already; the engine was ejected before")
    changes: dict[Path, bytes | None] = {}
    for folder in (project / "src", project / "tests", project / "scripts", project):
        for path in sorted(folder.glob("*.py") if folder == project else folder.rglob("*.py")):
            if path not in changes and (new := rewritten(path, package)) is not None:
                changes[path] = new
    renamed = len(changes)
    changes[project / "src" / package / "engine.py"] = None  # the import alias of older repos: now real
    text = pyproject.read_text()
    needs = [r for r in metadata.requires(DIST) or [] if "extra ==" not in r and not listed(text, r)]
    changes[pyproject] = without_engine(text, needs).encode()
    changes |= dict.fromkeys((project / "wheels").glob("lightning_gpu_engine-*.whl"))
    changes = {p: c for p, c in changes.items() if c is not None or p.exists()}
    return target, engine_files(package), changes, renamed


def staged(path: Path) -> Path:
    return path.with_name(path.name + STAGED)


def swap(target: Path, engine: dict[Path, bytes], changes: dict[Path, bytes | None]) -> None:
    """Writes the engine's copy and every new file beside its place, then renames each into place; on any failure,
    what was staged is removed and what was replaced is written back."""
    kept = {path: path.read_bytes() for path in changes if path.exists()}
    placed: list[Path] = []
    try:
        for name, contents in engine.items():
            (staged(target) / name).parent.mkdir(parents=True, exist_ok=True)
            (staged(target) / name).write_bytes(contents)
        for path, new in changes.items():
            if new is not None:
                staged(path).write_bytes(new)
                shutil.copymode(path, staged(path))
        os.replace(staged(target), target)
        placed.append(target)
        for path, data in changes.items():
            placed.append(path)
            if data is None:
                path.unlink()
            else:
                os.replace(staged(path), path)
    except BaseException:
        shutil.rmtree(staged(target), ignore_errors=True)
        for path in changes:
            staged(path).unlink(missing_ok=True)
        if target in placed:
            shutil.rmtree(target)
        for path in placed:
            if path in kept:
                path.write_bytes(kept[path])
        raise


def eject(project: Path) -> str:
    """Ejects the engine into `project`; what to print. EjectError: nothing was changed."""
    project = project.resolve()
    target, engine, changes, renamed = plan(project)
    swap(target, engine, changes)
    return (
        f"ejected {DIST} {metadata.version(DIST)} into {target.relative_to(project)}; {renamed} files now import "
        f"{target.parent.name}.engine. Next: pip uninstall {DIST} (or uv lock && uv sync), then run the tests"
    )
