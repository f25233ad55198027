"""How the entry points show warnings: one line each, and without third-party ones a user cannot act on.

Each is matched by its exact text and the module that triggers it, so the user's own warnings, this project's and any
new one from the same libraries still show. Remove an entry once the versions it names are past.
"""

from __future__ import annotations

import warnings

KNOWN_NOISE = (
    # Lightning 2.6's pytree helper builds LeafSpec, which torch 2.10+ deprecates: six lines per run, nothing to do.
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"lightning\."),
    # A sharded save in one process (sharded.py): DCP says it assumes one process, which is the case, at every save.
    (UserWarning, r"torch.distributed is disabled, unavailable or uninitialized", r"torch\.distributed\.checkpoint"),
)


def set_up_warnings() -> None:
    """For the entry points: one line per warning ("warning: skipping unreadable image PATH: why", not the message
    and then the line of code that raised it), set before loader workers start, and the known noise silenced."""
    warnings.formatwarning = lambda message, *args, **kwargs: f"warning: {message}\n"
    for category, message, module in KNOWN_NOISE:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
