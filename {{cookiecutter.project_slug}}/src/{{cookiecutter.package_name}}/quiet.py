"""Third-party warnings that say nothing a user of this project can act on, silenced by the entry points only.

Each is matched by its exact text and the module that triggers it, so the user's own warnings, this project's and any
new one from the same libraries still show. Remove an entry once the versions it names are past.
"""

from __future__ import annotations

import warnings

KNOWN_NOISE = (
    # Lightning 2.6's pytree helper builds LeafSpec, which torch 2.10+ deprecates: six lines per run, nothing to do.
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"lightning\."),
)


def silence_known_noise() -> None:
    for category, message, module in KNOWN_NOISE:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
