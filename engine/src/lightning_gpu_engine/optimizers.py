"""`--optimizer muon`: Muon for the 2-D hidden weights, AdamW for the rest, as one optimizer.

Lightning steps, clips, scales (16-mixed) and checkpoints one optimizer per LightningModule in automatic optimization,
and LambdaLR schedules one. `MuonWithAdamW` is that one: its param_groups are Muon's groups then AdamW's (the same
dictionaries, so the schedule's rates reach both), and the two share one state, so its state_dict is an ordinary
optimizer's and a resume restores both.

Layer 2: imports `config`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer


class MuonWithAdamW(Optimizer):
    def __init__(self, muon_groups: list[dict[str, Any]], adamw_groups: list[dict[str, Any]], **adamw: Any) -> None:
        # Muon's own defaults otherwise (momentum 0.95, Nesterov, 5 Newton-Schulz steps, Keller Jordan's shape scaling)
        self.parts = (torch.optim.Muon(muon_groups), torch.optim.AdamW(adamw_groups, **adamw))
        super().__init__([g for part in self.parts for g in part.param_groups], {})
        self._share()

    def _share(self) -> None:
        muon, adamw = self.parts
        muon.param_groups = self.param_groups[: len(muon.param_groups)]
        adamw.param_groups = self.param_groups[len(muon.param_groups) :]
        for part in self.parts:
            part.state = self.state  # parameters are keys: the two sets do not overlap

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # makes new group dictionaries and a new state: the parts follow them
        self._share()

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for part in self.parts:
            part.step()
        return loss


def head_names(net: nn.Module) -> set[str]:
    """The output layer's parameters: timm's classifier, else the last Linear layer built. Muon is for hidden
    weights; the layer that maps to classes or tokens keeps AdamW, as Muon's authors do."""
    get_classifier = getattr(net, "get_classifier", None)
    head = get_classifier() if callable(get_classifier) else None
    if not isinstance(head, nn.Module):
        head = next((m for m in reversed(list(net.modules())) if isinstance(m, nn.Linear)), None)
    if head is None:
        return set()
    ids = {id(p) for p in head.parameters()}
    return {name for name, p in net.named_parameters() if id(p) in ids}


def no_decay_names(net: nn.Module) -> set[str]:
    """Norm weights, biases, tokens and position embeddings (every tensor of at most one dimension as built, plus
    timm's own no_weight_decay list): decaying them only hurts."""
    names = {n for n, p in net.named_parameters() if p.ndim <= 1}
    skip = getattr(net, "no_weight_decay", None)
    listed = set(skip()) if callable(skip) else set()
    return names | {n for n, _ in net.named_parameters() if n in listed or n.split(".")[0] in listed}


def muon_names(net: nn.Module, no_decay: set[str]) -> set[str]:
    """Muon's parameters: the 2-D weights that decay, less the output layer's. Embeddings are 2-D too, but no
    optimizer step sees all their rows at once, and they are among the no-decay names already."""
    return {n for n, p in net.named_parameters() if p.ndim == 2 and n not in no_decay} - head_names(net)


def check_muon(module: Any, engine_built: bool) -> None:
    """--optimizer muon is refused in one line where it cannot work, before anything is written. `engine_built`:
    whether EngineModule builds the module's optimizers (module.engine_built_optimizer), not the team."""
    from lightning_gpu_engine.config.values import ConfigError

    if not hasattr(torch.optim, "Muon"):
        raise ConfigError("optimizer", f"muon needs torch 2.9 or newer (torch.optim.Muon); this is {torch.__version__}")
    if not engine_built:
        name = type(module).__name__
        raise ConfigError("optimizer", f"muon is EngineModule's optimizer, and {name} builds its own; use adamw")
    if not muon_names(module.net, no_decay_names(module.net)):
        name = type(module.net).__name__
        raise ConfigError("optimizer", f"{name} has no 2-D hidden weights, which are what Muon trains; use adamw")


def split_for_muon(
    groups: list[dict[str, Any]], names: dict[int, str], muon_names: set[str], muon_lr: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """AdamW's groups, less the parameters Muon takes (recorded by name before any wrapping), and Muon's group,
    with the decay of the group they came from."""
    muon: list[dict[str, Any]] = []
    adamw: list[dict[str, Any]] = []
    for group in groups:
        taken = [p for p in group["params"] if names[id(p)] in muon_names]
        rest = [p for p in group["params"] if names[id(p)] not in muon_names]
        if taken:
            muon.append({**group, "params": taken, "lr": muon_lr})
        if rest:
            adamw.append({**group, "params": rest})
    return muon, adamw
