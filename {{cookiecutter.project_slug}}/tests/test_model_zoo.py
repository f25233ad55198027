"""Every model a user can name runs: each torchvision classifier and a broad sample of timm families, one
`--fast-dev-run` each on the CPU at the smallest image size it accepts, batches of 2.

Slow (minutes), so it is its own CI step: `python -m pytest -m slow tests/test_model_zoo.py -p no:randomly -q`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torchvision

import train

# One member of each timm family we can name (small variants: the family's code path is what is tested).
TIMM_SAMPLE = [
    "resnet10t", "resnet18d", "resnext26ts", "seresnext26d_32x4d", "convnext_atto", "convnextv2_atto",
    "efficientnet_b0", "efficientnetv2_rw_t", "mobilenetv3_small_050", "mobilenetv4_conv_small", "ghostnetv2_100",
    "regnetx_002", "rexnet_100", "densenet121", "dla34", "dpn48b", "cspresnet50", "darknet17", "hrnet_w18_small",
    "inception_v3", "xception41", "nfnet_l0", "vgg11", "repvgg_a0", "fastvit_t8", "efficientformerv2_s0",
    "levit_128s", "vit_tiny_patch16_224", "deit_tiny_patch16_224", "swin_tiny_patch4_window7_224", "maxvit_nano_rw_256",
    "coatnet_nano_rw_224", "beit_base_patch16_224", "eva02_tiny_patch14_224", "mvitv2_tiny", "pvt_v2_b0",
    "poolformer_s12", "convmixer_768_32", "mixer_b16_224", "tiny_vit_5m_224", "edgenext_xx_small", "mobilevit_xxs",
    "hgnetv2_b0", "test_vit", "test_efficientnet", "test_byobnet",
]  # fmt: skip
NAMES = torchvision.models.list_models(torchvision.models) + [f"timm/{name}" for name in TIMM_SAMPLE]
SIZES = (32, 64, 96, 128, 160, 192, 224, 256, 299)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_nameable_model_trains_a_fast_dev_run_on_the_cpu(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--num-workers=0", "--logger=csv"]
    args += [f"--model={name}", "--batch-size=2", "--train-samples=2", "--fast-dev-run", "--no-compile"]
    args += [f"--output-dir={tmp_path / 'run'}"]
    size = SIZES[0]
    while True:
        try:
            metrics = train.main([*args, f"--image-size={size}"])
            break
        except SystemExit as stop:  # too small: the one-line answer names a size that fits
            error = capsys.readouterr().err
            hint = re.search(r"--image-size: \d+ px is too small for .*; try --image-size (\d+)", error)
            assert stop.code == 2 and hint and int(hint[1]) > size, error
            size = int(hint[1])
    assert "train/loss" in metrics and "test/acc" in metrics, f"{name} at {size} px"
