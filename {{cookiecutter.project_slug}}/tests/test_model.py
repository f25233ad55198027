from __future__ import annotations

import pytest
import torch
from torch import nn

from {{ cookiecutter.package_name }}.config import ConfigError
from {{ cookiecutter.package_name }}.model import ImageClassifier, build_network


def test_forward_gives_one_logit_per_class() -> None:
    model = ImageClassifier(num_classes=6, image_size=16)
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 6)


def test_channels_last_is_kept_through_every_convolution() -> None:
    model = ImageClassifier(num_classes=4, image_size=16, channels_last=True)
    seen: list[bool] = []
    for conv in (m for m in model.modules() if isinstance(m, nn.Conv2d)):
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)
        conv.register_forward_hook(
            lambda _m, inputs, _out: seen.append(inputs[0].is_contiguous(memory_format=torch.channels_last))
        )
    model(torch.randn(2, 3, 16, 16).contiguous(memory_format=torch.channels_last))
    assert len(seen) > 10 and all(seen)


def test_small_images_get_a_gentler_stem_large_ones_keep_imagenet_stem() -> None:
    small, large = build_network("resnet18", 3, 32), build_network("resnet18", 3, 224)
    assert isinstance(small.conv1, nn.Conv2d) and isinstance(large.conv1, nn.Conv2d)
    assert small.conv1.kernel_size == (3, 3) and isinstance(small.maxpool, nn.Identity)
    assert large.conv1.kernel_size == (7, 7) and isinstance(large.maxpool, nn.MaxPool2d)


def test_unknown_model_lists_the_valid_names() -> None:
    with pytest.raises(ConfigError, match=r"--model: unknown model 'resnet9000'.*resnet50"):
        build_network("resnet9000", 3, 32)


def test_norms_and_biases_get_no_weight_decay_also_on_fsdp_flat_shards() -> None:
    model = ImageClassifier(num_classes=3, image_size=16, weight_decay=0.1)
    fake_trainer = {"estimated_stepping_batches": 10, "precision": "32-true", "gradient_clip_val": None}
    model.trainer = type("T", (), fake_trainer)()  # type: ignore[assignment]

    def groups() -> list[list[nn.Parameter]]:
        decay, no_decay = model.configure_optimizers()["optimizer"].param_groups
        assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
        return [decay["params"], no_decay["params"]]

    decay, no_decay = groups()
    assert len(decay) == 21  # resnet18: 20 convolution weights and the classifier's weight
    assert all(p.ndim > 1 for p in decay) and all(p.ndim <= 1 for p in no_decay)
    for p in model.parameters():
        p.data = p.data.flatten()  # what FSDP leaves on each rank before configure_optimizers: 1-D views of a shard
    assert [[id(p) for p in group] for group in groups()] == [[id(p) for p in decay], [id(p) for p in no_decay]]
