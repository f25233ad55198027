"""The language model keeps every promise a team's own task is held to: the engine's conformance suite, run on
train.py."""

from __future__ import annotations

from lightning_gpu_engine import TaskConformance


class TestTheLanguageModel(TaskConformance):
    script = "train.py"
    tiny = ("--model=tiny", "--context=32", "--train-tokens=2500", "--max-steps=6")  # 4 steps an epoch, then validated
    bad = ("--context", "1")
