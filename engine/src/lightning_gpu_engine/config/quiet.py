"""How the entry points show warnings: one line each, `warning: ` for the engine's and the project's own, the library's
name for a library's (`lightning warning: `), and without third-party ones a user cannot act on.

Each silenced one is matched by its exact text and the module that triggers it, so the user's own warnings, this
project's and any new one from the same libraries still show. Remove an entry once the versions it names are past.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

KNOWN_NOISE = (
    # Lightning 2.6's pytree helper builds LeafSpec, which torch 2.10+ deprecates: six lines per run, nothing to do.
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"lightning\."),
    # A sharded save in one process (sharded.py): DCP says it assumes one process, which is the case, at every save.
    (UserWarning, r"torch.distributed is disabled, unavailable or uninitialized", r"torch\.distributed\.checkpoint"),
    # --precision auto picks bf16-mixed on CPUs that run it natively: the model summary then estimates the model's
    # size in MB at 32 bits, every run, which changes nothing about training
    (UserWarning, r"Precision \S+ is not supported by the model summary", r"lightning\."),
)
OURS = __name__.split(".")[0]  # the engine's package, or the project's once `eject` put the engine inside it
INSTALLED = {"site-packages", "dist-packages"}
MACHINERY = {"warnings", "_py_warnings", __name__}  # _py_warnings: where Python 3.14 moved the warnings module's code


def issuer(frame: FrameType | None) -> str | None:
    """Whose code issued the warning being shown: the top-level package of the first frame up the stack outside the
    warnings machinery and the rank-zero helpers that warn for their caller (a `stacklevel` may point anywhere). None
    for the engine's and the project's own code; "python" for the standard library's."""
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module not in MACHINERY and not module.endswith(".rank_zero"):
            break
        frame = frame.f_back
    if frame is None:
        return None
    top = str(frame.f_globals.get("__name__", "")).split(".")[0]
    if top == OURS:
        return None
    if top in sys.stdlib_module_names:
        return "python"
    return top if INSTALLED & set(Path(frame.f_code.co_filename).parts) else None


def one_line(message: Warning | str, *args: Any, **kwargs: Any) -> str:
    library = issuer(sys._getframe(1))
    return f"{library} warning: {message}\n" if library else f"warning: {message}\n"


def set_up_warnings() -> None:
    """For the entry points: one line per warning ("warning: skipping unreadable image PATH: why", not the message
    and then the line of code that raised it; "lightning warning: ..." for Lightning's), set before loader workers
    start, and the known noise silenced."""
    warnings.formatwarning = one_line
    for category, message, module in KNOWN_NOISE:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
