"""--pretrained: weights files made here (never downloaded), the offline answer, and the frozen first epochs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import run_train
from lightning_gpu_engine import Config, ConfigError, Hardware
from torch import nn

from {{ cookiecutter.package_name }}.tasks.image_classification.config import (
    ImageOptions,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.module import (
    ImageClassifier,
)

from .conftest import imagenet_like_resnet18

CPU = Hardware("cpu", 1, 1, "32-true", False, False, False, 0, False, "CPU")


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_a_weights_file_fills_every_backbone_tensor_and_the_head_is_new(
    suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = imagenet_like_resnet18(tmp_path / f"weights{suffix}")
    opts = ImageOptions(model="resnet18", pretrained=str(tmp_path / f"weights{suffix}"), image_size=32)
    model = ImageClassifier.from_config(Config(strategy="auto"), opts, CPU, ["a", "b", "c"])
    loaded = model.net.state_dict()
    assert set(loaded) == set(saved)
    for name in saved:
        if name.startswith("fc."):
            assert loaded[name].shape[0] == 3 and not loaded[name].any(), "a new zero head for our 3 classes"
        else:
            assert torch.equal(loaded[name], saved[name]), name
    assert isinstance(model.net.conv1, nn.Conv2d) and model.net.conv1.kernel_size == (7, 7), "stem left alone"
    note = capsys.readouterr().out.strip().splitlines()
    assert len(note) == 1 and "keeps its own stem" in note[0] and "a larger --image-size" in note[0]


@pytest.mark.parametrize(
    ("model", "file", "message"),
    [
        ("resnet34", "resnet18.pt", r"resnet18.pt lack 96 of resnet34's 218 tensors \(e.g. 'layer1.2.conv1.weight'\)"),
        ("resnet18", "missing.pt", r"--pretrained: no weights file at .*missing.pt; give a .pt/.pth/"),
        ("resnet18", "notes.txt", r"--pretrained: no weights file at .*notes.txt; give a .pt/.pth/"),
    ],
)
def test_weights_of_another_architecture_or_no_weights_file_are_refused(
    model: str, file: str, message: str, tmp_path: Path
) -> None:
    imagenet_like_resnet18(tmp_path / "resnet18.pt")
    (tmp_path / "notes.txt").write_text("not weights")
    with pytest.raises(ConfigError, match=message):
        opts = ImageOptions(model=model, pretrained=str(tmp_path / file))
        ImageClassifier.from_config(Config(), opts, CPU, ["a", "b"])


@pytest.mark.parametrize(
    ("model", "how"),
    [
        ("resnet18", "download https://download.pytorch.org/models/resnet18-f37072fd.pth into "),
        ("timm/resnet18.a1_in1k", "download model.safetensors from https://huggingface.co/timm/resnet18.a1_in1k"),
    ],
)
def test_offline_without_a_cache_says_in_one_line_how_to_provide_the_weights(
    model: str, how: str, tiny_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-cache"
    for variable in ("TORCH_HOME", "HF_HOME"):
        monkeypatch.setenv(variable, str(empty))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = run_train(*tiny_args, "--image-size=64", f"--model={model}", "--pretrained", "--fast-dev-run")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: --pretrained: cannot get {model}'s pretrained weights (")
    assert how in result.stderr and result.stderr.rstrip().endswith("pass --pretrained FILE")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "run").exists() and not any(empty.rglob("*.*")), "nothing half-written"


@pytest.mark.parametrize(
    ("model", "mean", "crop_pct", "interpolation"),
    [
        ("timm/vit_tiny_patch16_224.augreg_in21k", [127.5] * 3, 0.9, "bicubic"),  # timm's pretrained config
        ("resnet50", [123.675, 116.28, 103.53], 224 / 232, "bilinear"),  # torchvision's weights transforms (V2)
    ],
)
def test_pretrained_preprocessing_is_recorded_and_a_checkpoint_loads_without_fetching_weights(
    model: str, mean: list[float], crop_pct: float, interpolation: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    classifier = ImageClassifier(model=model, class_names=["a", "b"], image_size=32, pretrained="default")
    hp = classifier.hparams
    assert hp["mean"] == pytest.approx(mean) and hp["crop_pct"] == pytest.approx(crop_pct)
    assert hp["interpolation"] == interpolation
    path = tmp_path / "model.ckpt"
    torch.save(
        {"state_dict": classifier.state_dict(), "hyper_parameters": dict(hp), "pytorch-lightning_version": "2.6.6"},
        path,
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))
    loaded = ImageClassifier.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    x = torch.rand(2, 3, 32, 32) * 255
    assert torch.equal(loaded.eval()(x), classifier.eval()(x)), "same weights, same normalisation, nothing fetched"
