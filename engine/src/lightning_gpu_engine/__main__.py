"""`python -m lightning_gpu_engine docs|eject|bench|sweep`: the engine's guide for this version, the way out of the
package for a team that must change the engine itself, and the benchmark and the search for any task's file (`--task
my_task`), with no project around it. docs and eject need only the standard library: they answer without torch.

Layer 12: imports `bench`, `eject` and `sweep`.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
DIST = "lightning-gpu-engine"


def docs(_: argparse.Namespace) -> int:
    print(f"{DIST} {metadata.version(DIST)}: its guide is {HERE / 'docs'}")
    for page in sorted((HERE / "docs").glob("*.md")):
        print(f"  {page.name}: {page.read_text().splitlines()[0].lstrip('# ')}")
    return 0


def eject(args: argparse.Namespace) -> int:
    from lightning_gpu_engine.eject import EjectError, eject

    try:
        print(eject(args.project))
    except EjectError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
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
