"""One tiny CPU setup shared by every test: 16 px images, 32 training samples, batches of 8."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.fixture
def tiny_args(tmp_path: Path) -> list[str]:
    return [*TINY, "--max-epochs=1", f"--output-dir={tmp_path / 'run'}"]


def run_train(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python train.py ARGS` in a fresh process, as a user would run it (src/ on the path even if not installed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(ROOT / "train.py"), *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired as err:  # a hang fails its test with what the run printed, not a bare timeout
        out, errors = (s.decode() if isinstance(s, bytes) else s or "" for s in (err.stdout, err.stderr))
        return subprocess.CompletedProcess(command, -9, out, f"{errors}\nkilled: still running after {timeout:.0f} s")


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
