"""FSDP as Lightning sets it up (use_orig_params=True), run on the CPU over gloo with one rank.

CUDA's fused AdamW refuses a parameter whose gradient has other strides than itself ("params, grads, exp_avgs, and
exp_avg_sqs must have same dtype, device, and layout"); the CPU kernel does not check, so the strides are checked here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from lightning_gpu_engine import Config, Hardware, fsdp_units
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from {{ cookiecutter.package_name }}.tasks.image_classification import TASK
from {{ cookiecutter.package_name }}.tasks.image_classification.config import (
    ImageOptions,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.data import (
    ImageDataModule,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.module import (
    ImageClassifier,
)

GPU_LIKE = Hardware(
    accelerator="cuda",
    devices=1,
    world_size=1,
    precision="bf16-mixed",
    compile=False,
    channels_last=True,  # what a GPU resolves to: NHWC inputs
    pin_memory=True,
    num_workers=0,
    cudnn_benchmark=True,
    device_name="GPU",
)


@pytest.mark.parametrize("name", ["resnet18", "timm/convnext_atto"])
def test_under_fsdp_every_gradient_has_the_strides_of_its_parameter(name: str, tmp_path: Path) -> None:
    cfg, opts = Config(strategy="fsdp"), ImageOptions(model=name, image_size=32)
    model = ImageClassifier.from_config(cfg, opts, GPU_LIKE, ["a", "b", "c"])
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        wrapped = FullyShardedDataParallel(
            model,
            auto_wrap_policy=ModuleWrapPolicy(fsdp_units(TASK, model)),
            device_id=torch.device("cpu"),
            use_orig_params=True,
        )
        x = (torch.rand(4, 3, 32, 32) * 255).contiguous(memory_format=torch.channels_last)
        F.cross_entropy(wrapped(x), torch.tensor([0, 1, 2, 0])).backward()
        checked = 0
        for param_name, p in wrapped.named_parameters():
            if p.grad is not None and p.numel() > 0:
                assert p.grad.stride() == p.stride(), f"{param_name}: grad {p.grad.stride()} vs param {p.stride()}"
                checked += 1
        assert checked > 10
    finally:
        dist.destroy_process_group()


def test_under_fsdp_the_module_and_the_datamodule_agree_on_every_hparam_they_share() -> None:
    """Lightning refuses to start when they disagree: `--strategy fsdp --channels-last` once failed on its first GPU
    run because the module recorded NCHW weights as channels_last=False while the batches stayed NHWC."""
    opts = ImageOptions(image_size=32)
    model = ImageClassifier.from_config(Config(strategy="fsdp"), opts, GPU_LIKE, ["a", "b", "c"])
    datamodule = ImageDataModule(image_size=32, channels_last=bool(GPU_LIKE.channels_last))
    shared = model.hparams.keys() & datamodule.hparams.keys()
    assert "channels_last" in shared
    assert {k: model.hparams[k] for k in shared} == {k: datamodule.hparams[k] for k in shared}
    assert all(p.is_contiguous() for p in model.net.parameters()), "FSDP keeps the weights NCHW"
