"""Every save comes after every hook of its moment: a checkpoint holds what the module and every callback made of the
batch, the epoch or the validation that it ends.

Lightning calls the callbacks' hooks of a moment before the LightningModule's own (training_epoch_loop.advance,
evaluation_loop.on_run_end), its Checkpoint callbacks last among them; only at a training epoch's end does it call
the Checkpoints after the module (fit_loop.on_advance_end, as "monitoring" callbacks). So a save at a batch's end or a
validation's end missed what the module's own hook did next: a DDPM updating its average of the weights in its own
`on_train_batch_end`, killed after a --checkpoint-every save and resumed, lost that one update, and every value
validated with the average after it differed.

`SaveAfterHooks` holds each Checkpoint callback's hook of these moments back until the module's own hook of the same
moment has run, then calls them in Lightning's order, inside that call: nothing else Lightning does moves, so a
batch-end save keeps the loop counters Lightning restarts from (its last batch processed, not yet completed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

MOMENTS = ("on_train_batch_end", "on_train_epoch_end", "on_validation_epoch_end", "on_validation_end")
_ABSENT = object()


def moment(trainer: L.Trainer, hook: str) -> tuple[str, int]:
    """Which call of `hook` this is, as the callbacks' hooks and the module's of that call all see it: each call of
    one hook in a fit comes after more training batches than the one before it."""
    return hook, trainer.fit_loop.total_batch_idx


class SaveAfterHooks(Callback):
    """From fit's start to its end, the Checkpoint callbacks' hooks of each of MOMENTS run after the module's own.

    The hooks are replaced on the instances alone (Lightning looks each one up on the callback and on the module as
    it calls it), and put back when fit ends, however it ends, so nothing of this stays on the module."""

    def __init__(self) -> None:
        self._held: list[Callable[[], Any]] = []
        self._module_done: tuple[str, int] | None = None  # the moment whose module hook has run
        self._undo: list[Callable[[], None]] = []

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._put_back()
        if not trainer.checkpoint_callbacks:  # bench and --profile save nothing
            return
        for hook in MOMENTS:
            for checkpoint in trainer.checkpoint_callbacks:
                self._replace(checkpoint, hook, self._after_module(trainer, hook, getattr(checkpoint, hook)))
            self._replace(pl_module, hook, self._then_held(trainer, hook, getattr(pl_module, hook)))

    def _after_module(self, trainer: L.Trainer, hook: str, call: Callable[..., Any]) -> Callable[..., None]:
        def after_module(*args: Any, **kwargs: Any) -> None:
            if self._module_done == moment(trainer, hook):  # a training epoch's end: the module's hook came first
                call(*args, **kwargs)
            else:
                self._held.append(functools.partial(call, *args, **kwargs))

        return after_module

    def _then_held(self, trainer: L.Trainer, hook: str, own: Callable[..., Any]) -> Callable[..., Any]:
        def then_held(*args: Any, **kwargs: Any) -> Any:
            result = own(*args, **kwargs)
            self._module_done = moment(trainer, hook)
            held, self._held = self._held, []
            for call in held:
                call()
            return result

        return then_held

    def _replace(self, owner: object, name: str, replacement: Callable[..., Any]) -> None:
        before = vars(owner).get(name, _ABSENT)
        object.__setattr__(owner, name, replacement)

        def undo() -> None:
            if before is _ABSENT:
                vars(owner).pop(name, None)
            else:
                object.__setattr__(owner, name, before)

        self._undo.append(undo)

    def _put_back(self) -> None:
        while self._undo:
            self._undo.pop()()
        self._held, self._module_done = [], None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._put_back()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._put_back()  # a stop signal's save comes now, and needs nothing held

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._put_back()
