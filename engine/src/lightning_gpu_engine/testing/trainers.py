"""`trainers_with`: the Trainers the engine builds, with a test's callbacks and arguments, so a script run as its users
run it (train.py, a task's own) is watched from inside its own process, on every rank.

    trainers_with(DumpRank(folder))  # in a script, before it trains: for the rest of its process
    train.main(sys.argv[2:])

Lightning starts a run's other local ranks by running its command again, so each of them calls this too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L

from lightning_gpu_engine.trainer import trainer as trainer_module


def trainers_with(
    *extra: L.Callback, patch: Callable[[Any, str, Any], None] = setattr, **arguments: Any
) -> list[L.Trainer]:
    """From now on, every Trainer the engine builds has the `extra` callbacks after its own, and `arguments` in place
    of its own (`callbacks=[...]` replaces them all); the list it returns fills with those Trainers as they are built.
    `patch`: how the engine is changed, `monkeypatch.setattr` in a test that trains in its own process, so that the
    change ends with the test; the default, `setattr`, is a script's, for the rest of its process."""
    build_callbacks, build_trainer = trainer_module.build_callbacks, trainer_module.build_trainer
    built: list[L.Trainer] = []

    def with_extra(*args: Any, **kwargs: Any) -> list[L.Callback]:
        return [*build_callbacks(*args, **kwargs), *extra]

    def recorded(*args: Any, **kwargs: Any) -> L.Trainer:
        built.append(build_trainer(*args, **{**kwargs, **arguments}))
        return built[-1]

    patch(trainer_module, "build_callbacks", with_extra)
    patch(trainer_module, "build_trainer", recorded)
    return built
