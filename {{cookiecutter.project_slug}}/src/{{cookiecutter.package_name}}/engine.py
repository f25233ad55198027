"""This package's `engine`, as another name for lightning_gpu_engine.

Repos baked before the engine became a package imported it from here, and a team's own task files there keep working
after `cruft update`. New code imports `lightning_gpu_engine`.
"""

from typing import TYPE_CHECKING

import lightning_gpu_engine as _engine

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ hands each name over on first use
    from lightning_gpu_engine import *  # noqa: F403

__all__ = _engine.__all__


def __getattr__(name: str) -> object:
    return getattr(_engine, name)  # on first use, as the engine itself loads its heavy names
