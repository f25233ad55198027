"""`python -m lightning_gpu_engine docs|eject|bench|sweep`: the engine's guide for this version, the way out of the
package for a team that must change the engine itself, and the benchmark and the search for any task's file (`--task
my_task`), with no project around it. docs and eject need only the standard library: they answer without torch."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
DIST = "lightning-gpu-engine"
SKIP = shutil.ignore_patterns("__pycache__", "__main__.py")  # an ejected engine is not ejected again


def docs(_: argparse.Namespace) -> int:
    print(f"{DIST} {metadata.version(DIST)}: its guide is {HERE / 'docs'}")
    for page in sorted((HERE / "docs").glob("*.md")):
        print(f"  {page.name}: {page.read_text().splitlines()[0].lstrip('# ')}")
    return 0


def project_package(project: Path) -> str:
    packages = [p.parent.name for p in (project / "src").glob("*/__init__.py")]
    if len(packages) != 1:
        raise SystemExit(f"error: --project: {project} has no single package under src/ (found {packages or 'none'})")
    return packages[0]


def listed(pyproject: str, requirement: str) -> bool:
    """Whether the project already depends on the requirement's package (at whatever version it asks)."""
    name = re.split(r"[\s<>=!~\[;@]", requirement, maxsplit=1)[0]
    return re.search(rf'(?m)^\s*"{re.escape(name)}[\s<>=!~\[;@"]', pyproject) is not None


def without_engine(pyproject: str, needs: list[str]) -> str:
    """pyproject.toml with the engine's requirement, its comment and its uv source gone, and the engine's own needs
    added, so that the project installs what the ejected code imports."""
    lines = pyproject.splitlines()
    out: list[str] = []
    for line in lines:
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


def eject(args: argparse.Namespace) -> int:
    project = args.project.resolve()
    pyproject = project / "pyproject.toml"
    if not pyproject.is_file() or DIST not in pyproject.read_text():
        raise SystemExit(f"error: --project: {project} is not a project that depends on {DIST}")
    package = project_package(project)
    target = project / "src" / package / "engine"
    if target.is_dir():
        raise SystemExit(f"error: --project: {target} exists already; the engine was ejected before")
    shutil.copytree(HERE, target, ignore=SKIP)
    (project / "src" / package / "engine.py").unlink(missing_ok=True)  # the import alias of older repos: now real
    rewritten = 0
    for folder in (project / "src", project / "tests", project / "scripts", project):
        for path in folder.glob("*.py") if folder == project else folder.rglob("*.py"):
            text = path.read_text()
            if "lightning_gpu_engine" in text:
                path.write_text(text.replace("lightning_gpu_engine", f"{package}.engine"))
                rewritten += 1
    text = pyproject.read_text()
    needs = [r for r in metadata.requires(DIST) or [] if "extra ==" not in r and not listed(text, r)]
    pyproject.write_text(without_engine(text, needs))
    for wheel in (project / "wheels").glob("lightning_gpu_engine-*.whl"):
        wheel.unlink()
    print(
        f"ejected {DIST} {metadata.version(DIST)} into {target.relative_to(project)}; {rewritten} files now import "
        f"{package}.engine. Next: pip uninstall {DIST} (or uv lock && uv sync), then run the tests"
    )
    return 0


def tool(name: str, argv: list[str]) -> int:
    """bench or sweep with every argument theirs: `--task` names the task's module or file."""
    if name == "bench":
        from lightning_gpu_engine.bench import any_task

        any_task.main(argv, prog="python -m lightning_gpu_engine bench")
    else:
        from lightning_gpu_engine.sweep import main as sweep

        sweep(None, None, argv, prog="python -m lightning_gpu_engine sweep")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["bench"], ["sweep"]):
        return tool(argv[0], argv[1:])
    parser = argparse.ArgumentParser(prog="python -m lightning_gpu_engine", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="{docs,eject,bench,sweep}")
    commands.add_parser("docs", help="where this version's guide is").set_defaults(run=docs)
    out = commands.add_parser("eject", help="copy the engine into the project's package and drop the dependency")
    out.add_argument("--project", type=Path, default=Path.cwd(), help="the project's folder (default: here)")
    out.set_defaults(run=eject)
    commands.add_parser("bench", help="time a task's file for each setting: bench --task my_task [--help]")
    commands.add_parser("sweep", help="search a task's options: sweep --task my_task --space ... [--help]")
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
