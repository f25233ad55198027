"""Pretrained weights into a built network: the library's own (downloaded once, then cached) or a local file.

Only the backbone is taken: tensors whose shape differs from ours (the old classifier for its 1000 classes) are left
at their fresh initialisation. Every other tensor of the network must be found, so a file from another architecture
fails at start instead of fine-tuning a half-random network.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

import timm
import torch
import torchvision
from lightning_gpu_engine import ConfigError, read_checkpoint
from torch import Tensor, nn

from .inputs import LIBRARY, check_weights_file
from .networks import TIMM

DOWNLOAD_TIMEOUT_S = 60  # a network that swallows packets would otherwise hang the start-up forever


def load_pretrained(net: nn.Module, name: str, source: str, head: set[str], image_size: int) -> None:
    """Copy `source` (LIBRARY or a file path) into `net`, leaving the `head` tensors as they are if shapes differ."""
    state = library_state(name, image_size) if source == LIBRARY else file_state(source)
    own = net.state_dict()
    matched = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    missing = [k for k in own if k not in matched and k not in head]
    if missing:
        origin = "the pretrained weights" if source == LIBRARY else source
        raise ConfigError(
            "pretrained",
            f"{origin} lack {len(missing)} of {name}'s {len(own)} tensors (e.g. {missing[0]!r}); "
            "give weights saved from this same --model",
        )
    net.load_state_dict(matched, strict=False)


def file_state(path: str) -> Mapping[str, Tensor]:
    """A state_dict from .pt/.pth/.bin, .safetensors, or a Lightning .ckpt of this project (its `net.` weights)."""
    file = Path(path)
    check_weights_file(path)
    try:
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file

            state = load_file(path)
        else:
            state = read_checkpoint(file)  # never runs code from the file; a .ckpt may be a sharded folder
    except Exception as err:  # unpickling and safetensors raise many types; all mean unreadable
        raise ConfigError("pretrained", f"cannot read {path}: {str(err).splitlines()[0][:200]}") from None
    nested = state.get("state_dict") if isinstance(state, dict) else None
    if isinstance(nested, dict):  # a Lightning checkpoint
        state = {k.removeprefix("net."): v for k, v in nested.items() if k.startswith("net.")}
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ConfigError("pretrained", f"{path} holds no state_dict (a mapping of names to tensors)")
    return {k.removeprefix("module."): v for k, v in state.items()}  # DDP-saved files prefix every key


def library_state(name: str, image_size: int) -> Mapping[str, Tensor]:
    """The library's default pretrained weights for `name`: from its cache, or downloaded into it."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    old_timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        if name.startswith(TIMM):
            cfg = timm.models.get_pretrained_cfg(name[len(TIMM) :])
            if cfg is None or not (cfg.hf_hub_id or cfg.url):
                raise ConfigError("pretrained", f"timm has no pretrained weights for {name}; pass --pretrained FILE")
            how = (
                f"download model.safetensors from https://huggingface.co/{cfg.hf_hub_id} and pass --pretrained FILE"
                if cfg.hf_hub_id
                else f"download {cfg.url} and pass --pretrained FILE"
            )
            try:
                try:  # at our image size, as networks.build_network builds it: timm resamples position embeddings
                    return timm.create_model(name[len(TIMM) :], pretrained=True, img_size=image_size).state_dict()
                except TypeError:
                    return timm.create_model(name[len(TIMM) :], pretrained=True).state_dict()
            except (OSError, RuntimeError) as err:  # offline without a cache, a proxy, a truncated file
                raise _unavailable(name, err, how) from None
        weights = torchvision.models.get_model_weights(name).DEFAULT
        if weights is None:
            raise ConfigError("pretrained", f"torchvision has no pretrained weights for {name}; pass --pretrained FILE")
        cached = Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name
        how = f"download {weights.url} into {cached.parent}/ (the cache), or pass --pretrained FILE"
        if offline and not cached.is_file():
            raise _unavailable(name, OSError("HF_HUB_OFFLINE is set and the file is not in the cache"), how)
        try:
            return weights.get_state_dict(progress=False)
        except (OSError, RuntimeError) as err:
            raise _unavailable(name, err, how) from None
    finally:
        socket.setdefaulttimeout(old_timeout)


def _unavailable(name: str, err: BaseException, how: str) -> ConfigError:
    reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
    return ConfigError("pretrained", f"cannot get {name}'s pretrained weights ({reason}); {how}")
