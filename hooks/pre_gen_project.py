"""Refuse answers that would generate a broken project, before a single file of it is written.

Cookiecutter runs this inside the new, still empty project folder and deletes that folder when we exit non-zero,
so a refused answer leaves nothing behind; one line on stderr names the answer and says what would be valid.
The GPU knobs (precision, compile, channels_last, strategy, logger) are only defaults of runtime flags, and every
combination of them can run on some machine, so none is refused here: the generated project checks them at start.
"""

import json
import keyword
import re
import sys

# Rendered by cookiecutter as JSON inside a raw string: any answer, quotes and backslashes included, stays data.
ANSWERS = json.loads(r"""{{ cookiecutter | tojson }}""")
SLUG, PACKAGE, PYTHON, LOGGER = (ANSWERS[k] for k in ("project_slug", "package_name", "python_version", "logger"))

TASKS = ("image-classification", "language-model")  # one folder each under src/<package>/tasks/
SUPPORTED_PYTHON = ("3.10", "3.11", "3.12", "3.13")  # what torch, lightning and the generated code all run on
# Distributions the project depends on: pip cannot install a project that depends on its own name.
DEPENDENCIES = {"torch", "torchvision", "lightning", "torchmetrics", "numpy", "pyyaml", "rich", "tensorboard", "pillow"}
DEPENDENCIES |= {"timm", "torchcodec", "safetensors", "onnx", "onnxruntime", "onnxscript", "tokenizers", "transformers"}
DEPENDENCIES |= {"pytest", "ruff", "mypy", "types-pyyaml", "optuna", "matplotlib", "psycopg", "psycopg-binary"}
DEPENDENCIES |= {"litdata", "boto3", "moto"}
# Top-level modules the project or its dependencies import; a package of that name would be imported instead.
# (`test` is the standard library's own test package, which sys.stdlib_module_names leaves out.)
IMPORTED = {"torch", "torchvision", "lightning", "lightning_utilities", "pytorch_lightning", "torchmetrics", "numpy"}
IMPORTED |= {"yaml", "PIL", "rich", "tensorboard", "triton", "sympy", "fsspec", "packaging", "typing_extensions"}
IMPORTED |= {"tqdm", "jinja2", "filelock", "networkx", "pytest", "mypy", "ruff", "test"}
IMPORTED |= {"timm", "torchcodec", "safetensors", "huggingface_hub", "onnx", "onnxruntime", "onnxscript"}
IMPORTED |= {"optuna", "matplotlib", "sqlalchemy", "alembic", "psycopg", "tokenizers", "transformers"}
IMPORTED |= {"litdata", "boto3", "botocore", "moto", "obstore"}
# The project's own top-level scripts and test helpers (the template's tests fail when one is missing here).
IMPORTED |= {"train", "bench", "predict", "export", "conftest", "dump_ranks", "probes", "rank_metrics", "trained_model"}
IMPORTED |= {"pause_ranks", "test_resume", "sweep", "generate", "train_tokenizer", "test_language_model"}
IMPORTED |= {"prepare_data", "streaming_runs", "compile_cache_startup", "checkpoint_blocking", "template_update"}
IMPORTED |= {"machine_sharing", "reference_runs"}  # the suites' helpers for the machine they share, and references
# tests/ and its folders are packages (`tests.engine`, ...); the engine's tests run the README's task as my_task.py
IMPORTED |= {"tests", "__init__", "ranks", "my_task", "plain_loader", "prog_bar_loss", "defeated_channels_last"}
IMPORTED |= {"recompiling", "template_update", "unusable_outputs", "uncaptured", "gan", "sequence"}
if LOGGER in ("wandb", "mlflow"):  # the chosen tracker is a dependency too; the others are not
    DEPENDENCIES.add(LOGGER)
    IMPORTED.add(LOGGER)
# The longest import line, `from <package>.tasks.image_classification.config import (`, stays within the generated
# project's 120-column lint; a longer name would make the team's first CI run red.
MAX_PACKAGE = 64
DIST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508 names
# The cooldown is written into uv's, pip's, Renovate's and Dependabot's settings; Dependabot takes 1 to 90 days.
MAX_COOLDOWN = 90
BOTS = ("renovate", "dependabot")


def problem() -> str | None:
    if not DIST_NAME.fullmatch(SLUG):
        return (
            f"project_slug: {SLUG!r} is not a valid distribution name; use letters, digits and '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    if re.sub(r"[-_.]+", "-", SLUG).lower() in DEPENDENCIES:
        return f"project_slug: {SLUG!r} is the name of one of the project's dependencies; pick another name"
    if not (PACKAGE.isidentifier() and PACKAGE.isascii()):
        return f"package_name: {PACKAGE!r} is not a plain identifier: ASCII letters, digits and '_', no digit first"
    if len(PACKAGE) > MAX_PACKAGE:
        return f"package_name: {PACKAGE!r} is {len(PACKAGE)} characters; give one of at most {MAX_PACKAGE}"
    if keyword.iskeyword(PACKAGE):
        return f"package_name: {PACKAGE!r} is a Python keyword; pick another name"
    if PACKAGE in IMPORTED or PACKAGE in sys.stdlib_module_names:
        return f"package_name: {PACKAGE!r} would shadow a module the project needs (stdlib, dependency or its own)"
    if ANSWERS.get("task", TASKS[0]) not in TASKS:
        return f"task: {ANSWERS['task']!r} is not a task this template ships; choose one of {', '.join(TASKS)}"
    if PYTHON not in SUPPORTED_PYTHON:
        return f"python_version: {PYTHON!r} is not supported; choose one of {', '.join(SUPPORTED_PYTHON)}"
    cooldown = str(ANSWERS.get("cooldown_days", "7"))
    if not (re.fullmatch(r"0|[1-9][0-9]*", cooldown) and int(cooldown) <= MAX_COOLDOWN):
        return f"cooldown_days: {cooldown!r} is not a whole number of days from 0 (no cooldown) to {MAX_COOLDOWN}"
    if ANSWERS.get("dependency_bot", BOTS[0]) not in BOTS:
        return f"dependency_bot: {ANSWERS['dependency_bot']!r} is not offered; choose one of {', '.join(BOTS)}"
    for name in ("description", "author"):
        if re.search(r'["\\\x00-\x1f]', ANSWERS[name]):
            return f"{name}: {ANSWERS[name]!r} goes into pyproject.toml: no double quotes, backslashes or line breaks"
    return None


if (message := problem()) is not None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)
