"""The search space: a YAML mapping of train.py options to ranges, choices or fixed values, checked against the
options' types, then each value with the fixed flags through the options' own checks, before any trial starts.

    lr: {low: 1.0e-4, high: 1.0e-2, log: true}   # a float option: uniform, or log-uniform with log: true
    max_epochs: {low: 2, high: 8}                # an int option: integers from low to high
    batch_size: {choices: [64, 128, 256]}        # any option: one of these
    warmup_fraction: 0.1                         # any option: fixed for every trial
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any

from lightning_gpu_engine import Config, ConfigError, Task, converter, parse_run, read_yaml


class SpaceError(ValueError):
    """A search space that cannot be searched: the message names the file, the key and what would be valid."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "float", "int", "choice" or "fixed"
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        """The value for `trial` (an optuna.Trial); an enqueued trial gets back the value it was given."""
        if self.kind == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log)
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.choices))
        return self.choices[0]


def as_flag(name: str, value: Any) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [flag if value else "--no-" + flag[2:]]
    return [f"{flag}={'none' if value is None else value}"]


def load_space(path: str, task: Task, shown: str = "python train.py") -> list[Param]:
    """Every key an option of Config or of the task, every value of the option's type; `check_values` then puts each
    value through the options' checks. `shown`: the command the trials run, which a bad key is told to look up."""
    try:
        data = read_yaml(path, "space")
    except ConfigError as err:
        raise SpaceError(str(err)) from None
    if not isinstance(data, dict) or not data:
        raise SpaceError(f"--space: {path} must map option names to ranges, choices or values")
    hints = {**typing.get_type_hints(Config), **typing.get_type_hints(task.options)}
    if not task.channels_last:  # the layout is an option only of a task that declares one
        hints.pop("channels_last", None)
    reserved = ("output_dir", "resume", "config")
    params = []
    for key, spec in data.items():
        name = str(key).replace("-", "_")
        where = f"--space: {path}: {key!r}"
        if name in reserved or name not in hints:
            but = f" but {', '.join(reserved)}"
            valid = f"every option of {shown}{but}" if name in reserved else f"an option of {shown}"
            raise SpaceError(f"{where} is not {valid} (see {shown} --help)")
        params.append(_param(name, spec, hints[name], where))
    return params


def check_values(params: list[Param], path: str, task: Task, fixed: list[str], output_dir: str) -> None:
    """The fixed flags as the trials' script parses them (a bad one exits there, in its words), then each value of
    the space with them: a check that reads the machine (a --data-path that must exist) sees the path given, not its
    default. A refused value blames its key, and says when it is the fixed flags it cannot go with."""
    cfg, opts = parse_run([*fixed, f"--output-dir={output_dir}"], task)
    for param in params:
        for value in param.choices or (param.low, param.high):
            owner = cfg if param.name in Config.__dataclass_fields__ else opts
            try:
                dataclasses.replace(owner, **{param.name: value})  # its __post_init__ again, with this value
            except ConfigError as err:
                others = "" if err.option == param.name else " with the fixed flags"
                raise SpaceError(f"--space: {path}: {param.name!r}: {value!r} is refused{others}: {err}") from None


def _param(name: str, spec: Any, hint: Any, where: str) -> Param:
    base = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
    if not isinstance(spec, dict):
        return Param(name, "fixed", choices=(_value(spec, hint, where),))
    if set(spec) == {"choices"}:
        if not isinstance(spec["choices"], list) or not spec["choices"]:
            raise SpaceError(f"{where}: choices must be a non-empty list")
        return Param(name, "choice", choices=tuple(_value(v, hint, where) for v in spec["choices"]))
    if not {"low", "high"} <= set(spec) <= {"low", "high", "log"}:
        shapes = "a mapping with low and high (and log: true), one with choices, or a value"
        raise SpaceError(f"{where}: give {shapes}; got {spec}")
    if base not in (int, float):
        raise SpaceError(f"{where} is a {getattr(base, '__name__', base)} option: a range needs a number; use choices")
    low, high = (_value(spec[k], base, where) for k in ("low", "high"))
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise SpaceError(f"{where}: log must be true or false, got {log!r}")
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise SpaceError(f"{where}: low must be below high, both finite; got {low} and {high}")
    if log and low <= 0:
        raise SpaceError(f"{where}: a log range needs low > 0, got {low}")
    return Param(name, "float" if base is float else "int", low=low, high=high, log=log)


def _value(value: Any, hint: Any, where: str) -> Any:
    try:
        return converter(hint)(str(value).lower() if isinstance(value, bool) else str(value))
    except argparse.ArgumentTypeError as err:
        raise SpaceError(f"{where}: {err}") from None


def fixed_names(argv: list[str], options: type) -> set[str]:
    """The options that the flags after the sweep's own set for every trial."""
    names = {f.name for f in (*dataclasses.fields(Config), *dataclasses.fields(options))}
    flags = {arg.split("=", 1)[0].lstrip("-").replace("-", "_").removeprefix("no_") for arg in argv}
    return names & flags
