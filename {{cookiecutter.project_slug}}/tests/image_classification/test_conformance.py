"""The image task keeps every promise a team's own task is held to: the engine's conformance suite, run on train.py."""

from __future__ import annotations

from lightning_gpu_engine import TaskConformance


class TestTheImageTask(TaskConformance):
    script = "train.py"
    tiny = ("--image-size=16", "--train-samples=64", "--max-steps=6")  # 4 steps an epoch: validated, then stopped
    bad = ("--image-size", "0")
