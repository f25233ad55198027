"""The options of a run: the engine's Config and a task's own, parsed from flags and YAML into one-line refusals, and
the warnings kept quiet.

Its `__all__`: the names the front door re-exports from it, light enough to import with it.

Layer 0: imports no other part.
"""

from lightning_gpu_engine.config.cli import OneLineParser, converter, fail, note, parse_options, parse_run, read_yaml
from lightning_gpu_engine.config.options import Config, check_choices
from lightning_gpu_engine.config.quiet import set_up_warnings
from lightning_gpu_engine.config.values import ConfigError, TaskDefault, check_input, check_path, opt, parse_betas

__all__ = [
    "Config",
    "ConfigError",
    "OneLineParser",
    "TaskDefault",
    "check_choices",
    "check_input",
    "check_path",
    "converter",
    "fail",
    "note",
    "opt",
    "parse_betas",
    "parse_options",
    "parse_run",
    "read_yaml",
    "set_up_warnings",
]
