"""Bring the template's newest commit into this repo as one commit on a branch, and write the pull request's text.

    python scripts/template_update.py --branch template-update --body pr.md

It runs `cruft update`, which replays the template's changes since .cruft.json's commit onto this repo: a change that
does not apply cleanly leaves conflict markers or a FILE.rej beside the file, and the pull request lists them, since a
person has to resolve them. Exit 0 with nothing written when the repo is up to date; needs git and cruft on PATH, and
a clean work tree. .github/workflows/template-update.yml runs it monthly, pushes the branch and opens the pull request.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def template_commit() -> str:
    return str(json.loads(Path(".cruft.json").read_text())["commit"])


def conflicts() -> list[str]:
    """Files git could not merge (conflict markers inside) and the hunks cruft left as .rej files."""
    unmerged = git("diff", "--name-only", "--diff-filter=U").split()
    rejected = [p for p in git("ls-files", "--others", "--exclude-standard").split() if p.endswith(".rej")]
    return sorted(set(unmerged) | set(rejected))


def body(template: str, old: str, new: str, conflicted: list[str]) -> str:
    lines = [f"Template changes from {template}, commit {old[:12]} to {new[:12]}, applied by `cruft update`.", ""]
    if conflicted:
        lines += ["These did not apply cleanly and need a person: resolve the conflict markers, or apply the hunks of"]
        lines += ["each .rej file by hand and delete it, then push to this branch.", ""]
        lines += [f"- [ ] `{path}`" for path in conflicted]
    else:
        lines.append("Everything applied cleanly.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--branch", default="template-update", help="the branch that gets the update commit")
    parser.add_argument("--body", type=Path, required=True, help="where to write the pull request's text")
    args = parser.parse_args(argv)
    if subprocess.run(["cruft", "check"], capture_output=True).returncode == 0:
        print("up to date with the template: nothing to do")
        return 0
    old = template_commit()
    git("switch", "--quiet", "-C", args.branch)
    update = subprocess.run(["cruft", "update", "--skip-apply-ask"], capture_output=True, text=True)
    if update.returncode != 0:
        print(f"error: cruft update failed: {(update.stderr or update.stdout).strip()}", file=sys.stderr)
        return 1
    new, conflicted = template_commit(), conflicts()
    git("add", "--all")
    git("commit", "--quiet", "--no-verify", "-m", f"Update from the template ({old[:12]} to {new[:12]})")
    template = str(json.loads(Path(".cruft.json").read_text())["template"])
    args.body.write_text(body(template, old, new, conflicted))
    print(f"{args.branch}: template {old[:12]} to {new[:12]}, {len(conflicted)} file(s) need a person")
    return 0


if __name__ == "__main__":
    sys.exit(main())
