"""Bring the template's newest commit into this repo as one commit on a branch, and write the pull request's text.

    python scripts/template_update.py --branch template-update --body pr.md [--push origin]

It runs `cruft update`, which replays the template's changes since .cruft.json's commit onto this repo: a change that
does not apply cleanly leaves conflict markers or a FILE.rej beside the file, and the pull request lists them, since a
person has to resolve them. Exit 0 with nothing written when the repo is up to date; needs git and cruft on PATH, and
a clean work tree (else one line, and nothing changed). .github/workflows/template-update.yml runs it monthly with
--push origin, and opens the pull request.

An update branch is never reset: one that holds a commit the current branch lacks (last month's update with a person's
conflict resolution on it, here or on the --push remote) is left as it is, and this update goes on the first free
name after it (template-update-2, ...), which the script says. One whose every commit is on the current branch holds
nothing of its own, and is reused.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path


class Refused(Exception):
    """What the user must change first; one line."""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def succeeds(*args: str) -> bool:
    return subprocess.run(["git", *args], capture_output=True).returncode == 0


def template_commit() -> str:
    return str(json.loads(Path(".cruft.json").read_text())["commit"])


def conflicts() -> list[str]:
    """Files git could not merge (conflict markers inside) and the hunks cruft left as .rej files."""
    unmerged = git("diff", "--name-only", "--diff-filter=U").split()
    rejected = [p for p in git("ls-files", "--others", "--exclude-standard").split() if p.endswith(".rej")]
    return sorted(set(unmerged) | set(rejected))


def left_engine_files() -> list[str]:
    """Files of the engine copied into src/<package>/engine/ before it was a package that the update could not remove
    (a team changed them): src/<package>/engine.py names the package now, so nothing runs them."""
    tracked = git("ls-files", "src").split()
    old = [p for p in tracked if re.fullmatch(r"src/[^/]+/engine/.+\.py", p)]
    return sorted(p for p in old if f"{p.split('/engine/')[0]}/engine.py" in tracked)


def body(template: str, old: str, new: str, conflicted: list[str], left: list[str]) -> str:
    lines = [f"Template changes from {template}, commit {old[:12]} to {new[:12]}, applied by `cruft update`.", ""]
    if conflicted:
        lines += ["These did not apply cleanly and need a person: resolve the conflict markers, or apply the hunks of"]
        lines += ["each .rej file by hand and delete it, then push to this branch.", ""]
        lines += [f"- [ ] `{path}`" for path in conflicted]
    if left:
        lines += ["", "These are your changes to the engine this repo once carried: it is the lightning-gpu-engine"]
        lines += ["package now, so nothing runs them. Port each to the module its warning at start names (or"]
        lines += ["eject the engine: `python -m lightning_gpu_engine eject`), then delete the file:", ""]
        lines += [f"- [ ] `{path}`" for path in left]
    if not conflicted and not left:
        lines.append("Everything applied cleanly.")
    return "\n".join(lines) + "\n"


def check_ready() -> str:
    """The current branch, once git, cruft, the repo and its work tree allow an update; Refused otherwise."""
    if shutil.which("git") is None or shutil.which("cruft") is None:
        missing = "git" if shutil.which("git") is None else "cruft"
        raise Refused(f"{missing} is not on PATH: install it (pip install cruft), then run this again")
    if not succeeds("rev-parse", "--is-inside-work-tree"):
        raise Refused(f"{Path.cwd()} is not in a git repository: run this in the project's clone")
    if not Path(".cruft.json").is_file():
        raise Refused(f"{Path.cwd()} has no .cruft.json: run this at the root of a project made with cruft")
    changed = git("status", "--porcelain").splitlines()
    if changed:
        raise Refused(f"the work tree has {len(changed)} uncommitted change(s): commit or stash them, then run again")
    current = git("branch", "--show-current").strip()
    if not current:
        raise Refused("HEAD is detached: switch to the branch the update should start from (main), then run again")
    return current


def free_branch(wanted: str, remote: str | None) -> str:
    """`wanted`, unless it holds a commit HEAD lacks (locally, or on `remote`): then the first free `wanted-N`."""
    taken = set(git("branch", "--format=%(refname:short)").split())
    if remote is not None:
        heads = git("ls-remote", "--heads", remote).split()[1::2]
        taken |= {h.removeprefix("refs/heads/") for h in heads}
        if f"refs/heads/{wanted}" in heads:
            git("fetch", "--quiet", remote, f"+refs/heads/{wanted}:refs/remotes/{remote}/{wanted}")

    def holds_work(ref: str) -> bool:  # a commit that HEAD lacks
        exists = succeeds("rev-parse", "--verify", "--quiet", ref)
        return exists and not succeeds("merge-base", "--is-ancestor", ref, "HEAD")

    if not holds_work(f"refs/heads/{wanted}") and not (remote and holds_work(f"refs/remotes/{remote}/{wanted}")):
        return wanted
    return next(f"{wanted}-{n}" for n in range(2, 10_000) if f"{wanted}-{n}" not in taken)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--branch", default="template-update", help="the branch that gets the update commit")
    parser.add_argument("--body", type=Path, required=True, help="where to write the pull request's text")
    parser.add_argument("--push", metavar="REMOTE", help="push the branch there (never forced)")
    args = parser.parse_args(argv)
    try:
        start = check_ready()
    except Refused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if subprocess.run(["cruft", "check"], capture_output=True).returncode == 0:
        print("up to date with the template: nothing to do")
        return 0
    old = template_commit()
    branch = free_branch(args.branch, args.push)
    if branch != args.branch:
        kept = f"{args.branch} holds commits that {start} lacks (a person's work, perhaps): left as it is"
        print(f"{kept}; this update goes on {branch}")
    made = not succeeds("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
    git("switch", "--quiet", "-C", branch)
    update = subprocess.run(["cruft", "update", "--skip-apply-ask"], capture_output=True, text=True)
    if update.returncode != 0:  # back where the user was, as if it had never run
        subprocess.run(["git", "switch", "--quiet", "--force", start], capture_output=True)
        if made:
            subprocess.run(["git", "branch", "--quiet", "-D", branch], capture_output=True)
        reason = (update.stderr or update.stdout).strip().splitlines()
        said = reason[-1] if reason else "no reason given"
        print(f"error: cruft update failed ({said}); still on {start}", file=sys.stderr)
        return 1
    new, conflicted, left = template_commit(), conflicts(), left_engine_files()
    git("add", "--all")
    git("commit", "--quiet", "--no-verify", "-m", f"Update from the template ({old[:12]} to {new[:12]})")
    if args.push is not None:
        git("push", "--quiet", args.push, f"{branch}:refs/heads/{branch}")
    template = str(json.loads(Path(".cruft.json").read_text())["template"])
    args.body.write_text(body(template, old, new, conflicted, left))
    print(f"{branch}: template {old[:12]} to {new[:12]}, {len(conflicted) + len(left)} file(s) need a person")
    return 0


if __name__ == "__main__":
    sys.exit(main())
