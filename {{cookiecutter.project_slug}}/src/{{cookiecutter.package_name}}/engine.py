"""This package's `engine`, as another name for lightning_gpu_engine, at every depth.

Repos baked before the engine became a package imported it from here, and a team's own task files there keep working
after `cruft update`: `<package>.engine.X` is the engine's own module object, also for the modules that moved
(`.engine.hardware` is `lightning_gpu_engine.perf.hardware`; the template's engine/UPGRADING.md lists them). New code
imports `lightning_gpu_engine`.
"""

from typing import TYPE_CHECKING

import lightning_gpu_engine as _engine

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ hands each name over on first use
    from lightning_gpu_engine import *  # noqa: F403

__all__ = _engine.__all__
_engine.alias_engine(__name__)


def __getattr__(name: str) -> object:
    return getattr(_engine, name)  # on first use, as the engine itself loads its heavy names
