"""What the GPU tests share: the skip marks, and `train.main` run as a user runs it with probe callbacks attached.

Each knob test runs on CUDA where one is visible; where the same mechanism also exists on the CPU (bf16 autocast,
loss scaling, dynamo, channels_last) the test also runs there, so CI without a GPU still checks its logic.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, TypeVar

import lightning as L
import pytest
import torch
from lightning_gpu_engine.testing import trainers_with
from torch import nn

import train
from {{ cookiecutter.package_name }}.tasks.image_classification.decoding import (
    torchcodec_available,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.module import (
    ImageClassifier,
)

GPUS = torch.cuda.device_count()
NEEDS_TORCHCODEC = pytest.mark.skipif(
    not torchcodec_available(),
    reason="GPU decoding needs TorchCodec >= 0.16 (pip install 'torchcodec>=0.16'): missing or failing to load here",
)
NEEDS_GPU = pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU; torch sees none on this machine")
NEEDS_GPUS = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 or more CUDA GPUs; torch sees {GPUS} on this machine")
GPU = [pytest.mark.gpu, NEEDS_GPU]
CPU_AND_GPU = pytest.mark.parametrize("accelerator", ["cpu", pytest.param("cuda", marks=GPU)])
Layer = TypeVar("Layer", bound=nn.Module)


def fit(monkeypatch: pytest.MonkeyPatch, args: list[str], *probes: L.Callback, **trainer_overrides: Any) -> L.Trainer:
    """`train.main(args)`, its Trainer's callbacks replaced by `probes`: no checkpoints or progress bar to slow it."""
    overrides = {"callbacks": list(probes), "enable_checkpointing": False, "enable_progress_bar": False}
    built = trainers_with(patch=monkeypatch.setattr, **{**overrides, **trainer_overrides})
    train.main(args)
    return built[0]


def steps_of_the_last_run(output_dir: Path) -> list[int]:
    """The global steps that the last process to train in `output_dir` logged: the rows of the CSV logs from the last
    one whose per-process batch count is 1 on. A run that resumed at step 4 logs 4, 5, ...; one that ignored the
    checkpoint logs 0, 1, ... again, whether the logger appends to the earlier rows or starts the file afresh."""
    rows = [row for path in sorted(output_dir.rglob("metrics.csv")) for row in csv.DictReader(path.open())]
    batches = [(int(float(r["step"])), float(r["train/batches"])) for r in rows if r.get("train/batches")]
    starts = [i for i, (_, count) in enumerate(batches) if count == 1]
    assert starts, f"no training step logged under {output_dir}"
    return [step for step, _ in batches[starts[-1] :]]


def network(pl_module: L.LightningModule) -> nn.Module:
    """The torchvision network inside the ImageClassifier: what is compiled, and what the batch is fed to."""
    net = pl_module.net
    assert isinstance(net, nn.Module)
    return net


def layers(pl_module: L.LightningModule, kind: type[Layer]) -> list[Layer]:
    return [m for m in network(pl_module).modules() if isinstance(m, kind)]


def assert_loads_where_no_gpu_is_visible(checkpoint: Path, root: Path) -> None:
    """A checkpoint written on a GPU loads in a fresh process that sees no GPU: every tensor on the CPU, and the
    classifier gives finite logits for [0, 255] images."""
    load_on_cpu = (
        f"import sys, torch; from {ImageClassifier.__module__} import ImageClassifier; "
        "model = ImageClassifier.load_from_checkpoint(sys.argv[1], map_location='cpu', weights_only=True).eval(); "
        "print(torch.cuda.is_available(), *{str(t.device) for t in model.state_dict().values()}, "
        "bool(model(torch.rand(2, 3, 16, 16) * 255).isfinite().all()))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)]), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", load_on_cpu, str(checkpoint)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["False", "cpu", "True"], "no GPU visible, every tensor on the CPU, finite logits"
