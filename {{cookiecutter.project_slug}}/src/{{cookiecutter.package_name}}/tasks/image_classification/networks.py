"""Which network a --model name means, built with a head for our classes, and what it can be measured for.

Naming rule: `timm/<name>[.<tag>]` is a timm model (`timm/convnext_tiny.fb_in22k`); any other name is a torchvision
classification model (`resnet50`). The prefix is required so one name never silently means two networks: `resnet50`
exists in both zoos with different layers and weights.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Sequence
from typing import Any

import timm
import torch
import torchvision
from lightning_gpu_engine import ConfigError, note
from torch import nn

from .transforms import CROP_PCT

TIMM = "timm/"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _torchvision_kinds() -> dict[str, str]:
    kinds = {}
    for kind in ("detection", "segmentation", "video", "optical_flow", "quantization"):
        kinds.update(dict.fromkeys(torchvision.models.list_models(getattr(torchvision.models, kind)), kind))
    return kinds


def check_name(name: str) -> None:
    """Refuse, in one line with the closest valid names, anything that is not a classifier of either zoo."""
    classifiers = torchvision.models.list_models(torchvision.models)
    if name.startswith(TIMM):
        if timm.is_model(name[len(TIMM) :]):
            return
        candidates = [TIMM + n for n in timm.list_models() + timm.list_models(pretrained=True)]
    elif name in classifiers:
        return
    elif name in _torchvision_kinds():
        raise ConfigError(
            "model",
            f"{name!r} is a torchvision {_torchvision_kinds()[name]} model, not an image classifier; "
            f"use a classifier such as resnet50, or timm/<name>",
        )
    elif timm.is_model(name):
        raise ConfigError("model", f"{name!r} is not a torchvision classifier; for timm's, write timm/{name}")
    else:
        candidates = classifiers + [TIMM + n for n in timm.list_models()]
    close = difflib.get_close_matches(name, candidates, n=4, cutoff=0.6)
    hint = f"closest: {', '.join(close)}" if close else "see torchvision.models.list_models() or timm.list_models()"
    raise ConfigError("model", f"unknown model {name!r}; {hint} (timm models are written timm/<name>)")


def build_network(name: str, num_classes: int, image_size: int, pretrained: bool = False) -> nn.Module:
    """Randomly initialised (weights come later, see weights.py), with a head of `num_classes` outputs.

    `pretrained` keeps the ImageNet stem and input geometry that pretrained weights were made for."""
    check_name(name)
    if name.startswith(TIMM):
        try:  # ViT-like models size their position embedding for the image (timm resamples pretrained ones)
            net = timm.create_model(name[len(TIMM) :], num_classes=num_classes, img_size=image_size)
        except TypeError:  # a model without an img_size argument: convolutional, any size fits
            net = timm.create_model(name[len(TIMM) :], num_classes=num_classes)
    else:
        kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
        if name.startswith("vit_") and not pretrained:
            kwargs["image_size"] = image_size  # torchvision's ViT checks for exactly this size
        if name in ("inception_v3", "googlenet"):
            kwargs["aux_logits"] = False  # training-only side heads; the main output is the classifier
            kwargs["init_weights"] = True  # what the default does, said explicitly because the default warns
        net = torchvision.models.get_model(name, **kwargs)
    conv1, maxpool = getattr(net, "conv1", None), getattr(net, "maxpool", None)
    stem = isinstance(conv1, nn.Conv2d) and isinstance(maxpool, nn.MaxPool2d)
    if isinstance(conv1, nn.Conv2d) and stem and image_size <= 64 and not pretrained:  # never with pretrained weights
        # A 7x7/2 conv plus max-pool shrinks a tiny image 4x before the first block; a 3x3/2 stem without the pool
        # halves it once, keeping 4x the resolution (stride 1 would gain ~2% on CIFAR-10 for 4x the compute).
        net.conv1 = nn.Conv2d(3, conv1.out_channels, kernel_size=3, stride=2, padding=1, bias=False)
        net.maxpool = nn.Identity()
    return net


def head_names(net: nn.Module, name: str, num_classes: int, image_size: int, pretrained: bool) -> set[str]:
    """The parameters of the classifier head: exactly those whose shape depends on the number of classes.

    Found by building the network twice on the meta device (shapes only), so it works for every architecture; for a
    network that cannot be built there (torchvision's RegNets compute their widths with tensors), its last Linear."""
    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            one = build_network(name, num_classes, image_size, pretrained).state_dict()
            two = build_network(name, num_classes + 1, image_size, pretrained).state_dict()
        return {key for key, value in one.items() if key in two and two[key].shape != value.shape}
    except (NotImplementedError, RuntimeError):
        last = [n for n, m in net.named_modules() if isinstance(m, nn.Linear)][-1:]
        return {n for n, _ in net.named_parameters() if last and n.rpartition(".")[0] == last[0]}


def preprocessing(name: str | None) -> dict[str, Any]:
    """The input the pretrained weights were trained with: mean/std (0-255 scale), crop_pct, interpolation, size."""
    mean: Sequence[float] = IMAGENET_MEAN
    std: Sequence[float] = IMAGENET_STD
    crop_pct, interpolation, size = CROP_PCT, "bilinear", 224
    if name is None:
        pass  # not pretrained: ImageNet's statistics, the usual choice for natural images
    elif name.startswith(TIMM):
        cfg = timm.models.get_pretrained_cfg(name[len(TIMM) :])
        if cfg is not None:
            mean, std, crop_pct = cfg.mean, cfg.std, cfg.crop_pct
            interpolation, size = cfg.interpolation, cfg.input_size[-1]
    else:
        weights = torchvision.models.get_model_weights(name).DEFAULT if _has_weights(name) else None
        if weights is not None:
            transform = weights.transforms()
            mean, std, interpolation = transform.mean, transform.std, transform.interpolation.value
            size, crop_pct = transform.crop_size[0], transform.crop_size[0] / transform.resize_size[0]
    return {
        "mean": [round(m * 255, 4) for m in mean],
        "std": [round(s * 255, 4) for s in std],
        "crop_pct": float(crop_pct),
        "interpolation": str(interpolation),
        "input_size": int(size),
    }


def _has_weights(name: str) -> bool:
    try:
        return torchvision.models.get_model_weights(name).DEFAULT is not None
    except (ValueError, AttributeError):
        return False


def check_image_size(name: str, num_classes: int, image_size: int, pretrained: bool = False) -> None:
    """Run the network on the meta device (shapes only: no memory, no compute) so a too-small image fails at start.

    A network that cannot run on the meta device is left to the real run, with a note."""

    def fits(size: int) -> bool | None:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                net = build_network(name, num_classes, size, pretrained)
            except ConfigError:
                raise
            except (AssertionError, ValueError):  # a constructor refusing the size (ViT: a multiple of its patch)
                return False
            except Exception:  # a constructor that needs real numbers
                return None
            try:
                net(torch.empty(2, 3, size, size))
            except NotImplementedError:
                return None  # an op without a meta kernel
            except (RuntimeError, ValueError, AssertionError, TypeError):  # what conv, pool and ViT's size check raise
                return False
        return True

    verdict = fits(image_size)
    if verdict is None:
        note(f"cannot check on the meta device whether {image_size} px fits {name}; the first step will tell")
    elif not verdict:
        larger = next((s for s in (32, 56, 64, 96, 112, 128, 224, 299, 384, 518) if s > image_size and fits(s)), None)
        hint = f"try --image-size {larger}" if larger else "try a larger --image-size"
        raise ConfigError("image_size", f"{image_size} px is too small for {name}; {hint}")
