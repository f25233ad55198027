"""Every save comes after every hook of its moment (checkpoint/after_hooks.py): at each batch's, epoch's and
validation's end, the checkpoint callbacks' hooks run after the module's own and after those of the callbacks it
brings, and nothing of this stays on the module or the callbacks once fit has ended. The saves themselves are proven
through the door users use, by the conformance suite's hard kill of a DDPM (test_shapes_conformance.py)."""

from __future__ import annotations

import copy
import dataclasses
from types import ModuleType
from typing import Any

import lightning as L
import pytest
from lightning.pytorch.callbacks import Callback, Checkpoint

from lightning_gpu_engine import run_hparams, train
from lightning_gpu_engine.checkpoint.after_hooks import MOMENTS
from lightning_gpu_engine.trainer import trainer as trainer_module


def recording(base: type, who: str, seen: list[tuple[str, str]]) -> type:
    """`base` with each hook of MOMENTS noting `who` ran it, in `seen`."""

    def note(hook: str) -> Any:
        def noted(self: Any, *args: Any) -> None:
            seen.append((hook, who))

        return noted

    return type(f"Recording{base.__name__}", (base,), {hook: note(hook) for hook in MOMENTS})


def test_the_checkpoint_callbacks_run_after_the_module_and_the_callbacks_it_brings_at_every_moment(
    toy: ModuleType, tiny_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str]] = []
    brought, saves = recording(Callback, "brought", seen), recording(Checkpoint, "checkpoint", seen)
    module = recording(toy.Regressor, "module", seen)
    module.configure_callbacks = lambda self: [brought()]
    built: list[L.LightningModule] = []

    def build_model(cfg: Any, opts: Any, hw: Any, data: Any) -> L.LightningModule:
        built.append(module(opts.features, opts.hidden, **run_hparams(cfg, hw)))
        return built[-1]

    build_callbacks = trainer_module.build_callbacks
    monkeypatch.setattr(trainer_module, "build_callbacks", lambda *a, **k: [*build_callbacks(*a, **k), saves()])
    train(dataclasses.replace(toy.TASK, build_model=build_model), [*tiny_args, "--checkpoint-every=1steps"])

    for hook in MOMENTS:
        order = [who for moment, who in seen if moment == hook]
        times = len(order) // 3
        assert times and order == ["brought", "module", "checkpoint"] * times, (hook, order)
    [model] = built
    assert not set(MOMENTS) & set(vars(model)), "a hook of the module's was left replaced after fit"
    copy.deepcopy(model)  # as a team may, after fit
