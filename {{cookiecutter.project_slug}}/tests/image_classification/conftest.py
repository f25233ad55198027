"""The image task's tiny CPU setup: 16 px images, 32 training samples, batches of 8 (tests/conftest.py makes
`tiny_args` of it)."""

from __future__ import annotations

from pathlib import Path

import torch
import torchvision
from safetensors.torch import save_file

# Pinned, not left to the bake's defaults: 16-mixed and fsdp need CUDA, and these tests must run on any CPU.
TINY = [
    "--accelerator=cpu",
    "--precision=32-true",
    "--strategy=auto",
    "--image-size=16",
    "--batch-size=8",
    "--train-samples=32",
    "--num-workers=0",
    "--logger=csv",
    "--log-every-n-steps=1",
]
# Each entry point's refusals of files its flags name, answered before torch and Lightning load: (script, its flags,
# what its one line says); {tmp}: an empty folder. tests/test_engine_use.py adds bench.py's and sweep.py's
MISSING_INPUTS = [
    ("train.py", ["--data=folder", "--data-dir={tmp}/missing"], "--data-dir: folder data needs {tmp}/missing/train/"),
    ("train.py", ["--pretrained={tmp}/none.pt"], "--pretrained: no weights file at {tmp}/none.pt"),
    ("predict.py", ["--checkpoint={tmp}/none.ckpt", "{tmp}"], "--checkpoint: no file at {tmp}/none.ckpt; give a .ckpt"),
    ("predict.py", ["--checkpoint={tmp}", "{tmp}/none.png"], "INPUT: {tmp}/none.png: no such file or folder"),
    ("export.py", ["--checkpoint={tmp}/none.ckpt"], "--checkpoint: no file at {tmp}/none.ckpt; give a .ckpt"),
    ("prepare_data.py", ["--data-dir={tmp}/none", "--output={tmp}/c"], "--data-dir: folder data needs {tmp}/none/"),
]


def imagenet_like_resnet18(path: Path) -> dict[str, torch.Tensor]:
    """A resnet18 with 1000 classes and non-default values everywhere (BatchNorm statistics included), saved."""
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=1000)
    for key, tensor in net.state_dict().items():  # views of the network's own tensors
        if key.endswith("running_mean"):
            tensor.uniform_(-1, 1)
        elif key.endswith("running_var"):
            tensor.uniform_(0.5, 2)
        elif key.endswith(".weight") and tensor.ndim == 1:
            tensor.uniform_(0.5, 1.5)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    if path.suffix == ".safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        torch.save(state, path)
    return state
