"""What a landing (`pytest --landing`, as .ci/run runs it) leaves out: the tests .ci/guarded.toml lists, each run only
when a file under its paths changed since the branch left main (or since CI_BASE, a commit), and on demand with
`-m guarded`."""

from __future__ import annotations

import os
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1]
GUARDED = TEMPLATE / ".ci" / "guarded.toml"


@dataclass(frozen=True)
class Guarded:
    test: str  # its node id, without parameters
    why: str
    paths: tuple[str, ...]  # files, or folders ending in /, relative to the template's root


def guarded() -> dict[str, Guarded]:
    table = tomllib.loads(GUARDED.read_text())
    return {test: Guarded(test, entry["why"], tuple(entry["paths"])) for test, entry in table.items()}


def changed_files() -> tuple[set[str] | None, str]:
    """The files changed since the base (committed or not), and the base named; None where git cannot tell."""
    base = os.environ.get("CI_BASE") or "main"

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=TEMPLATE, capture_output=True, text=True, check=False)
        if done.returncode:
            raise LookupError(done.stderr.strip() or f"git {' '.join(args)} failed")
        return done.stdout

    try:
        fork = git("merge-base", "HEAD", base).strip()
        names = git("diff", "--name-only", fork).split() + git("ls-files", "--others", "--exclude-standard").split()
    except (LookupError, OSError) as err:
        return None, f"git cannot tell what changed since {base} ({err})"
    return set(names), f"{base} ({fork[:12]})"


def touched(entry: Guarded, changed: set[str]) -> list[str]:
    return sorted(f for f in changed if any(f == p or (p.endswith("/") and f.startswith(p)) for p in entry.paths))
