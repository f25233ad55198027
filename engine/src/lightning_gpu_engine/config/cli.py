"""Flags and YAML files, both generated from the options dataclasses (the engine's `Config` and the task's) so they can
never drift from them."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import yaml

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError, TaskDefault, default_value

if TYPE_CHECKING:  # the task's fields are read, never its module's imports: the Task sits above the options
    from lightning_gpu_engine.task import Task

_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
T = typing.TypeVar("T")


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a bad flag answered in one line and exit 2: every entry point's parser. Its usage names the
    command that was run: `predict.py` in a clone, the installed `<project>-predict` after `pip install`."""

    def __init__(self, prog: str | None = None, **kwargs: Any) -> None:
        super().__init__(prog=installed_as(prog) if prog else None, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(message)


def installed_as(script: str) -> str:
    """`script` (predict.py), or the console script standing for it when that is what runs (`<project>-predict`)."""
    running = Path(sys.argv[0]).name
    return running if running.endswith("-" + script.removesuffix(".py").replace("_", "-")) else script


def fail(message: str, code: int = 2) -> NoReturn:
    """One line and an exit code (2 for bad input, like argparse) instead of a traceback."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def note(message: str) -> None:
    """One line for something that could not be measured or set up, while the run goes on without it."""
    print(f"note: {message}", flush=True)


def converter(annotation: Any) -> Callable[[str], Any]:
    """str -> value for a field's type; `X | None` also accepts 'none', and 'auto' for the unset default of a number.

    A text field keeps 'auto' as it is: `--resume auto` is a value, not the absence of one.
    """
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = args[0] if args else annotation

    def convert(text: str) -> Any:
        if args and (text.lower() in ("none", "null") or (text.lower() == "auto" and base is not str)):
            return None
        if base is bool:
            if text.lower() in _TRUE + _FALSE:
                return text.lower() in _TRUE
            raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
        try:
            return base(text)
        except ValueError:
            kind = "an integer" if base is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None

    return convert


class Refused(argparse.Action):
    """The flag of an option the task does not have: off --help, and refused in one line with the reason."""

    def __init__(self, option_strings: Sequence[str], dest: str, reason: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.reason = reason

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        fail(f"{option}: not an option of this task: {self.reason}")


def build_parser(
    *schemas: type,
    prog: str,
    description: str,
    defaults: Mapping[str, Any] | None = None,
    hidden: Collection[str] = (),
) -> argparse.ArgumentParser:
    """Flags for each field of the dataclasses `schemas` (train.py: Config and the task's options), but the `hidden`
    ones (options this task does not have: left out of --help, and refused if given, with the reason where `hidden`
    maps each to one); `defaults` replace the fields' own (a Task's, each a value or a `TaskDefault` with its reason)
    and say so in --help."""
    defaults = defaults or {}
    parser = OneLineParser(prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--config", metavar="FILE.yaml", help="YAML file of options (keys as the flags, with _)")
    hints = {k: v for schema in schemas for k, v in typing.get_type_hints(schema).items()}
    for name in hidden:
        flag = "--" + name.replace("_", "-")
        boolean = hints.get(name) is bool or bool in typing.get_args(hints.get(name))
        flags = [flag, flag.replace("--", "--no-", 1)] if boolean else [flag]
        refused = dict(dest=f"refused_{name}", nargs="?", action=Refused, help=argparse.SUPPRESS)
        parser.add_argument(*flags, **refused, reason=why_hidden(hidden, name))  # type: ignore[arg-type]
    for f in (f for schema in schemas for f in dataclasses.fields(schema) if f.name not in hidden):
        if f.metadata["positional"]:  # e.g. predict.py's INPUT...: one or more values
            parser.add_argument(f.name, nargs="+", metavar=f.name.upper().rstrip("S"), help=f.metadata["help"])
            continue
        flag = "--" + f.name.replace("_", "-")
        # argparse %-formats help texts (for %(default)s), so a literal % must be doubled
        given = defaults.get(f.name, f.default)
        why = f": {given.why}" if isinstance(given, TaskDefault) else ""
        marked = f" [the task's default{why}]" if f.name in defaults else ""
        help_text = (f.metadata["help"] + marked).replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": f.name, "default": default_value(given), "help": help_text}
        if f.metadata.get("const") is not None:  # a flag whose value may be left out, like --pretrained [PATH]
            kwargs.update(nargs="?", const=f.metadata["const"])
        if f.metadata["choices"]:
            kwargs["metavar"] = "{" + ",".join(f.metadata["choices"]) + "}"
        if bool in typing.get_args(hints[f.name]) or hints[f.name] is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        else:
            parser.add_argument(flag, type=converter(hints[f.name]), **kwargs)
    return parser


def read_yaml(path: str, option: str) -> Any:
    """The file's YAML, safely loaded; ConfigError for --`option` with the line and column of a syntax error."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise ConfigError(option, f"cannot read {path}: {err.strerror or err}") from None
    except (UnicodeDecodeError, yaml.reader.ReaderError):  # e.g. a .ckpt given by mistake
        raise ConfigError(option, f"{path} is a binary file, not YAML; give a text file of name: value lines") from None
    except yaml.MarkedYAMLError as err:
        where = f"{path}:{err.problem_mark.line + 1}:{err.problem_mark.column + 1}" if err.problem_mark else path
        raise ConfigError(option, f"{where}: {err.problem or err.context} (not valid YAML)") from None


def load_yaml(path: str, *schemas: type, hidden: Collection[str] = ()) -> dict[str, Any]:
    """Read an options file with the safe loader; unknown keys and wrong types fail here, naming the key. `hidden`:
    options the task does not have (channels_last for a task that does not declare the layout)."""
    try:
        data = read_yaml(path, "config") or {}
    except ConfigError as err:
        fail(str(err))
    if not isinstance(data, dict):
        fail(f"--config: {path} must hold a mapping of option: value")
    hints = {k: v for schema in schemas for k, v in typing.get_type_hints(schema).items()}
    defaults = {f.name: f.default for schema in schemas for f in dataclasses.fields(schema)}
    values = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in hidden:
            why = why_hidden(hidden, name)
            fail(f"--config: key {key!r} in {path} is not an option of this task ({why}); delete the line")
        if name not in hints:
            fail(f"--config: unknown key {key!r} in {path}; valid keys: {', '.join(hints)}")
        if isinstance(value, list) and hints[name] is str:  # a comma-separated option (betas, devices) as a list
            value = ",".join(map(str, value))
        optional = type(None) in typing.get_args(hints[name])
        if (value is None and not optional) or isinstance(value, list | dict):
            given = "has no value" if value is None else "holds a list or mapping"
            fail(f"--config: key {key!r} in {path} {given}; give one value, or delete the line for {defaults[name]!r}")
        if value is None or (hints[name] is float and isinstance(value, int) and not isinstance(value, bool)):
            values[name] = value
            continue
        try:
            values[name] = converter(hints[name])(str(value))
        except argparse.ArgumentTypeError as err:
            fail(f"--config: key {key!r} in {path}: {err}")
    return values


def parse_run(argv: Sequence[str] | None, task: Task, prog: str | None = None) -> tuple[Config, Any]:
    """A task's options and the engine's: flags override the --config file, which overrides the task's defaults, which
    override the engine's. `prog`: the script --help names; unset, the one that was run."""
    description = f"Train {task.name}. Flags override --config; every default is shown with its reason."
    prog = prog or Path(sys.argv[0]).name
    args = _parse(argv, (Config, task.options), prog, description, task.defaults, engine_options_hidden(task))
    own = {f.name for f in dataclasses.fields(task.options)}
    try:
        return Config(**{k: v for k, v in args.items() if k not in own}), task.options(**{k: args[k] for k in own})
    except ConfigError as err:
        fail(str(err))


def parse_options(argv: Sequence[str] | None, schema: type[T], prog: str, description: str) -> T:
    """Options of the dataclass `schema` (predict.py's, export.py's), checked by its __post_init__, then the files
    they name by its `check_inputs()` where it has one: as train.py's Task.check_inputs, before torch and Lightning
    load (__post_init__ checks values alone, so code and tests may build options naming files not made yet)."""
    args = _parse(argv, (schema,), prog, description)
    try:
        options = schema(**args)
        if hasattr(options, "check_inputs"):
            options.check_inputs()
        return options
    except ConfigError as err:
        fail(str(err))


def engine_options_hidden(task: Task) -> dict[str, str]:
    """The engine's options a task does not have, each with why (`Task.options_not_applied`)."""
    return task.options_not_applied


def why_hidden(hidden: Collection[str], name: str) -> str:
    return hidden[name] if isinstance(hidden, Mapping) else "it has no such option"


def _parse(
    argv: Sequence[str] | None,
    schemas: tuple[type, ...],
    prog: str,
    description: str,
    defaults: Mapping[str, Any] | None = None,
    hidden: Collection[str] = (),
) -> dict[str, Any]:
    parser = build_parser(*schemas, prog=prog, description=description, defaults=defaults, hidden=hidden)
    config_file = _peek_config(argv)
    if config_file:
        parser.set_defaults(**load_yaml(config_file, *schemas, hidden=hidden))
    args = vars(parser.parse_intermixed_args(argv))  # INPUT... may come before, between and after flags
    args.pop("config")
    for name in hidden:
        args.pop(f"refused_{name}")
    return args


def _peek_config(argv: Sequence[str] | None) -> str | None:
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--config")
    return peek.parse_known_args(argv)[0].config


def save_yaml(values: dict[str, Any], path: Path) -> None:
    """The options of a run, as --config reads them back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values, sort_keys=False))
