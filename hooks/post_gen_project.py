"""Keep the chosen task's files only, by one folder rule: every folder of src/<package>/tasks/ is a task, whose tests
are tests/<that folder>/ and whose entry points and configs are _variants/<task>/, copied over the root. Then give the
project its engine: the wheel of the template's engine/ folder in wheels/ (engine_source=bundled), or the version
range of the template's release (engine_source=index), written into pyproject.toml."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

TASK = "{{ cookiecutter.task }}"
TASKS = Path("src", "{{ cookiecutter.package_name }}", "tasks")
ENGINE_SOURCE = "{{ cookiecutter.engine_source }}"


def stop(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)  # cookiecutter and cruft delete the half-made project


def template_root() -> Path:
    """The template checkout this project is made from. Cookiecutter and cruft run a hook from a temporary copy of
    it, with the project as its working folder, while they themselves work in the template's folder: the parent's."""
    parent = os.getppid()
    try:
        where = Path(os.readlink(f"/proc/{parent}/cwd"))  # Linux
    except OSError:
        try:  # macOS and the BSDs: lsof names the working folder of a process
            command = ["lsof", "-a", "-p", str(parent), "-d", "cwd", "-Fn"]
            found = subprocess.run(command, capture_output=True, text=True, check=False)
            where = Path(next(line[1:] for line in found.stdout.splitlines() if line.startswith("n")))
        except (OSError, StopIteration):
            stop("cannot find the template's folder from this process (it needs Linux's /proc or lsof)")
    if not (where / "engine" / "pyproject.toml").is_file():
        stop(f"the template at {where} has no engine/ folder; bake from a complete checkout of the template")
    return where


for other in (p.name for p in TASKS.iterdir() if p.is_dir() and p.name not in (TASK.replace("-", "_"), "__pycache__")):
    shutil.rmtree(TASKS / other)
    shutil.rmtree(Path("tests", other), ignore_errors=True)  # a task may have no tests of its own yet
if Path("_variants", TASK).is_dir():
    shutil.copytree(Path("_variants", TASK), ".", dirs_exist_ok=True)
shutil.rmtree("_variants")

# One dependency bot: two would open every update twice.
BOT_CONFIGS = {"renovate": Path("renovate.json"), "dependabot": Path(".github", "dependabot.yml")}
for bot, config in BOT_CONFIGS.items():
    if bot != "{{ cookiecutter.dependency_bot }}":
        config.unlink()

ENGINE = template_root() / "engine"
sys.path.insert(0, str(ENGINE / "_build"))
import wheel_backend  # the engine's own build backend, the one pip and uv call

VERSION = wheel_backend.project(ENGINE)["version"]
readme = Path("README.md")
readme.write_text(readme.read_text().replace("@ENGINE_VERSION@", VERSION))
pyproject = Path("pyproject.toml")
text = pyproject.read_text()
if ENGINE_SOURCE == "bundled":
    wheel = wheel_backend.build(ENGINE, Path("wheels"))
    text = text.replace("@ENGINE_WHEEL@", wheel.name)
    text = text.replace("@ENGINE_SHA256@", hashlib.sha256(wheel.read_bytes()).hexdigest())
else:
    major, minor = VERSION.split(".")[:2]
    text = text.replace("@ENGINE_SERIES@", f"{major}.{minor}")
pyproject.write_text(text)
