from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning_gpu_engine import ConfigError, fsdp_units
from torch import nn

import train
from {{ cookiecutter.package_name }}.tasks.image_classification import TASK
from {{ cookiecutter.package_name }}.tasks.image_classification.finetune import (
    schedules,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.module import (
    ImageClassifier,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.networks import (
    build_network,
)

SHAPES = ["circle", "square", "triangle", "cross", "ring", "diamond"]


def test_forward_normalises_0_to_255_images_itself_and_gives_one_logit_per_class() -> None:
    model = ImageClassifier(class_names=SHAPES, image_size=16).eval()
    x = torch.rand(2, 3, 16, 16) * 255
    imagenet_mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
    imagenet_std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255
    logits = model(x)
    assert logits.shape == (2, 6)
    assert torch.allclose(logits, model.net((x - imagenet_mean) / imagenet_std), atol=1e-5)
    hp = model.hparams
    assert hp["class_names"] == SHAPES and hp["crop_pct"] == 0.875 and hp["interpolation"] == "bilinear"
    assert hp["mean"] == pytest.approx([123.675, 116.28, 103.53])
    assert hp["std"] == pytest.approx([58.395, 57.12, 57.375])


def test_channels_last_is_kept_through_every_convolution() -> None:
    model = ImageClassifier(class_names=SHAPES[:4], image_size=16, channels_last=True)
    seen: list[bool] = []
    for conv in (m for m in model.modules() if isinstance(m, nn.Conv2d)):
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)
        conv.register_forward_hook(
            lambda _m, inputs, _out: seen.append(inputs[0].is_contiguous(memory_format=torch.channels_last))
        )
    model(torch.randn(2, 3, 16, 16).contiguous(memory_format=torch.channels_last))
    assert len(seen) > 10 and all(seen)


def test_small_images_get_a_gentler_stem_large_ones_and_pretrained_keep_imagenet_stem() -> None:
    small, large = build_network("resnet18", 3, 32), build_network("resnet18", 3, 224)
    pretrained = build_network("resnet18", 3, 32, pretrained=True)
    assert isinstance(small.conv1, nn.Conv2d) and isinstance(large.conv1, nn.Conv2d)
    assert small.conv1.kernel_size == (3, 3) and isinstance(small.maxpool, nn.Identity)
    for net in (large, pretrained):
        assert isinstance(net.conv1, nn.Conv2d) and net.conv1.kernel_size == (7, 7)
        assert isinstance(net.maxpool, nn.MaxPool2d)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("resnet9000", r"--model: unknown model 'resnet9000'; closest: resnet50, resnet101"),
        ("timm/convnxt_tiny.fb_in22k", r"unknown model 'timm/convnxt_tiny\.fb_in22k'; closest: timm/convnext_tiny\."),
        ("fasterrcnn_resnet50_fpn", r"'fasterrcnn_resnet50_fpn' is a torchvision detection model, not an image classi"),
        ("vit_tiny_patch16_224", r"'vit_tiny_patch16_224' is not a torchvision classifier; for timm's, write timm/vit"),
    ],
)
def test_a_wrong_model_name_gets_one_line_with_the_closest_valid_names(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        build_network(name, 3, 32)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300, "the closest few, not the whole zoo"


@pytest.mark.parametrize("name", ["fasterrcnn_resnet50_fpn", "resnet9000"])
def test_train_py_refuses_a_wrong_model_in_one_line_blaming_model_and_downloads_nothing(
    name: str, tiny_args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        train.main([*tiny_args, f"--model={name}", "--fast-dev-run"])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and error.startswith("error: --model: ") and name in error
    assert len(error.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("name", "block", "head"),
    [
        ("resnet18", "BasicBlock", "fc.weight"),
        ("timm/resnet18", "BasicBlock", "fc.weight"),
        ("timm/convnext_atto.d2_in1k", "ConvNeXtStage", "head.fc.weight"),
        ("timm/vit_tiny_patch16_224.augreg_in21k", "Block", "head.weight"),
    ],
)
def test_each_name_form_builds_and_keeps_fsdp_blocks_flops_layout_and_compile_working(
    name: str, block: str, head: str
) -> None:
    model = ImageClassifier(model=name, class_names=SHAPES[:3], image_size=32, channels_last=True)
    assert model.net.state_dict()[head].shape[0] == 3, "the head has one output per class"
    assert head in model.head
    assert block in {t.__name__ for t in fsdp_units(TASK, model)}, "FSDP shards and checkpoints one block at a time"
    assert model.count_flops(batch_size=2) > 0, "counted on the meta device"
    convs = [m.weight for m in model.net.modules() if isinstance(m, nn.Conv2d)]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) for w in convs)
    x = (torch.rand(2, 3, 32, 32) * 255).contiguous(memory_format=torch.channels_last)
    if name.startswith("timm/"):  # torchvision's compile is tested by tests/gpu/test_gpu_compile.py's CPU twin
        model.eval()
        eager = model(x)
        model.net.compile(backend="eager")  # dynamo traces the network (inductor's code generation: on the GPU)
        assert torch.allclose(model(x), eager, atol=1e-5)


def test_norms_biases_and_tokens_get_no_weight_decay_also_on_fsdp_flat_shards() -> None:
    model = ImageClassifier(class_names=SHAPES[:3], image_size=16, weight_decay=0.1)
    fake_trainer = {
        "estimated_stepping_batches": 10,
        "num_training_batches": 10,
        "accumulate_grad_batches": 1,
        "precision": "32-true",
        "gradient_clip_val": None,
        "strategy": None,
        "world_size": 1,
    }
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


def test_fine_tuning_schedule_freezes_then_warms_the_backbone_up_to_a_fraction_of_the_head() -> None:
    lr = schedules(total=100, warmup=10, freeze_steps=20, backbone_scale=0.1)
    head, backbone = lr[False], lr[True]
    assert [head(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0]), "linear warm-up"
    assert head(99) < 0.01 and head(50) < head(20) < 1.0, "cosine decay"
    assert all(backbone(s) == 0.0 for s in range(20)), "frozen: exactly zero"
    assert backbone(20) == pytest.approx(0.1 * 0.1 * head(20)), "warms up again over 10 steps from unfreezing"
    assert backbone(29) == pytest.approx(0.1 * head(29)), "then a tenth of the head's rate on the same cosine"
    assert all(backbone(s) <= 0.1 * head(s) + 1e-12 for s in range(100))
