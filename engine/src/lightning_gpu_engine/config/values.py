"""The values options take: how a flag's text is parsed and checked, the one error every bad value raises, and a
task's default with its reason. Standard library only, under everything else of the engine."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAME_MAX, PATH_MAX = 255, 4095  # bytes in a file or folder name, and in a whole path, on Linux
# Why a task under manual optimization has no --gradient-clip-val or --accumulate-grad-batches
MANUAL = (
    "the module steps its own optimizers (manual optimization), and Lightning clips and accumulates only for "
    "automatic optimization: clip with self.clip_gradients and accumulate in training_step"
)


class ConfigError(ValueError):
    """A bad option value: `option` is the flag to blame (a positional's name in capitals, INPUT, is shown as it is),
    the message says what would be valid."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option if option.isupper() else '--' + option.replace('_', '-')}: {message}")
        self.option = option


@dataclass(frozen=True)
class TaskDefault:
    """A task's default for an engine option with its reason and source, which `--help` shows beside it."""

    value: Any
    why: str


def default_value(given: Any) -> Any:
    """A task's default as the option takes it: the value of a `TaskDefault`, or the value given plainly."""
    return given.value if isinstance(given, TaskDefault) else given


def opt(default: Any, why: str, choices: tuple[str, ...] = (), const: Any = None, positional: bool = False) -> Any:
    """`const`: the value of the flag given without one (`--pretrained` alone), making its value optional.
    `positional`: one or more values given without a flag (predict.py's INPUT...)."""
    return field(default=default, metadata={"help": why, "choices": choices, "const": const, "positional": positional})


def check_path(option: str, value: str | None) -> None:
    """Refuse a path the filesystem would refuse ("File name too long") only once some folders were made."""
    name = max((os.fsencode(part) for part in Path(value or "").parts), key=len, default=b"")
    if len(name) > NAME_MAX:
        shown = f"{name[:24].decode(errors='replace')}..."
        raise ConfigError(option, f"{shown} is a {len(name)}-byte name, the limit is {NAME_MAX}; give shorter names")
    if len(os.fsencode(os.path.abspath(value or "."))) > PATH_MAX:
        raise ConfigError(option, f"the full path is over the limit of {PATH_MAX} bytes; give a shorter one")


def check_input(option: str, path: str, give: str) -> None:
    """A file or folder an entry point reads is there: called from its options' `check_inputs` (`parse_options`),
    before torch loads, so that a typo answers at once, not after seconds of imports. `give`: what to give instead."""
    if not os.path.exists(path):
        raise ConfigError(option, f"no file at {path}; give {give}")


def as_flag(name: str, value: Any) -> str:
    """The flag that gives option `name` its `value`: `--lr 0.01`, `--no-ema`, `--max-steps none`."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else flag.replace("--", "--no-", 1)
    return f"{flag} {'none' if value is None else value}"


def parse_every(text: str) -> tuple[int | None, float | None]:
    """'30min' -> (None, 1800.0), '500steps' -> (500, None), '1h,200steps' -> (200, 3600.0), 'off' -> (None, None)."""
    steps: int | None = None
    seconds: float | None = None
    if text.strip().lower() in ("off", "none", "epoch"):
        return steps, seconds
    for part in text.lower().replace(" ", "").split(","):
        found = re.fullmatch(r"(\d+(?:\.\d+)?)(steps?|s|sec|min|m|h)", part)
        if found is None or float(found.group(1)) <= 0 or (found.group(2).startswith("step") and steps is not None):
            raise ConfigError(
                "checkpoint_every",
                f"expected e.g. '30min', '2h', '90s', '500steps', '30min,500steps' or 'off'; got {text!r}",
            )
        number, unit = float(found.group(1)), found.group(2)
        if unit.startswith("step"):
            if not number.is_integer():
                raise ConfigError("checkpoint_every", f"a whole number of steps, got {text!r}")
            steps = int(number)
        else:
            seconds = number * {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}[unit]
    return steps, seconds


def parse_betas(text: str) -> tuple[float, float]:
    """'0.9,0.95' -> (0.9, 0.95): AdamW's two decay rates, each in [0, 1)."""
    try:
        betas = tuple(float(part) for part in str(text).split(","))
    except ValueError:
        betas = ()
    if len(betas) != 2 or not all(0 <= beta < 1 for beta in betas):
        raise ConfigError("betas", f"expected two numbers in [0, 1) like '0.9,0.95', got {text!r}")
    return betas[0], betas[1]


def usable_cpus() -> int:
    """CPUs this process may run on: the affinity mask (taskset, cgroups, srun --cpu-bind), not the machine's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parse_devices(value: str) -> int | list[int] | str:
    """'auto' -> 'auto', '2' -> 2 (a count), '0,1' -> [0, 1] (GPU ids), as Lightning's Trainer takes them."""
    text = str(value).strip()
    if text == "auto":
        return text
    try:
        if "," in text:
            ids = [int(part) for part in text.split(",") if part.strip()]
            if ids and all(i >= 0 for i in ids) and len(set(ids)) == len(ids):
                return ids
        elif int(text) >= 1:
            return int(text)
    except ValueError:
        pass
    raise ConfigError("devices", f"expected 'auto', a positive count or distinct GPU ids like '0,1'; got {value!r}")
