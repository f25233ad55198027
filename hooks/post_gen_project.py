"""Keep the chosen task's files only, by one folder rule: every folder of src/<package>/tasks/ is a task, whose tests
are tests/<that folder>/ and whose entry points and configs are _variants/<task>/, copied over the root. The engine
and its tests (tests/engine/) are shared by every task."""

import shutil
from pathlib import Path

TASK = "{{ cookiecutter.task }}"
TASKS = Path("src", "{{ cookiecutter.package_name }}", "tasks")

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
