"""A bake installed as its README tells a user with pip, into a fresh virtual environment made from the bake alone:
nothing of the template's environment is seen, so a package its suite imports and its `dev` extra does not declare
fails the suite there (issue 51, case 8: `onnxruntime`), where the template's environment, which has everything,
would hide it."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from conftest import run

# The README's pip line, `pip install [--uploaded-prior-to PnD] -e ".[dev]"`, and before it, where its cooldown flag
# needs a newer pip than a fresh venv has, the line that brings one
PIP_LINE = re.compile(r'`(pip install [^`]*-e "\.\[dev\]")`')
PIP_UPGRADE = re.compile(r'`(python -m pip install -U "pip>=[\d.]+")`')
# The README's test command: `pytest` alone on a line of its first code block, a comment after it
TEST_LINE = re.compile(r"(?m)^(pytest)(?=\s+#|\s*$)")


def readme_commands(project: Path) -> tuple[list[list[str]], list[str]]:
    """The install commands and the test command the bake's README gives for pip, as its words are."""
    readme = (project / "README.md").read_text()
    upgrade, install, test = PIP_UPGRADE.search(readme), PIP_LINE.search(readme), TEST_LINE.search(readme)
    assert install and test, 'the README no longer gives `pip install ... -e ".[dev]"` and `pytest`: update these'
    return [shlex.split(m.group(1)) for m in (upgrade, install) if m], shlex.split(test.group(1))


def install_as_readme_says(project: Path, where: Path, timeout: float) -> tuple[list[str], dict[str, str]]:
    """`python -m venv WHERE`, then the README's pip lines in the project, WHERE activated. The README's test command
    in WHERE, and the variables that activate WHERE (its bin first on PATH) for it to run with. No
    --system-site-packages: the bake alone."""
    activated = {"VIRTUAL_ENV": str(where), "PATH": os.pathsep.join([str(where / "bin"), os.environ["PATH"]])}
    install, test = readme_commands(project)
    for command in ([sys.executable, "-m", "venv", where], *([where / "bin" / c[0], *c[1:]] for c in install)):
        done = run(*command, cwd=project, timeout=timeout, env=activated)
        assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return [str(where / "bin" / test[0]), *test[1:]], activated
