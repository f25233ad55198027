"""The image task resumed mid-epoch reports the epoch metrics of an uninterrupted run: its running accuracy counts
the steps before the stop too (the engine's stops and resumes are lightning-gpu-engine's tests/test_resume.py's)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import SAVING, TINY
from lightning_gpu_engine import read_checkpoint

import train
from {{ cookiecutter.package_name }}.tasks.image_classification.module import (
    ImageClassifier,
)


def last_checkpoint(output_dir: Path) -> dict[str, Any]:
    return read_checkpoint(output_dir / "checkpoints" / "last.ckpt")


def interrupt_at(monkeypatch: pytest.MonkeyPatch, step: int, interruption: str) -> None:
    """Ctrl-C during optimizer step `step`, as a user gives it (the run saves once the step is done), or a crash once
    the step is done, which leaves no time to save."""

    def on_train_batch_start(self: ImageClassifier, batch: Any, batch_idx: int) -> None:
        if self.global_step == step - 1 and interruption == "ctrl-c":
            os.kill(os.getpid(), signal.SIGINT)

    def on_train_batch_end(self: ImageClassifier, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step == step and interruption == "crash":
            raise RuntimeError("crash")

    monkeypatch.setattr(ImageClassifier, "on_train_batch_start", on_train_batch_start)
    monkeypatch.setattr(ImageClassifier, "on_train_batch_end", on_train_batch_end, raising=False)


def record_running_accuracy(monkeypatch: pytest.MonkeyPatch) -> dict[int, float]:
    """After every step of the next run: the training accuracy of its epoch so far."""
    running: dict[int, float] = {}

    def on_train_batch_end(self: ImageClassifier, outputs: Any, batch: Any, batch_idx: int) -> None:
        running[self.global_step] = float(self.train_acc.compute())

    monkeypatch.setattr(ImageClassifier, "on_train_batch_end", on_train_batch_end, raising=False)
    return running


def telling_step(running: dict[int, float]) -> int:
    """A step of the second of two 4-step epochs after which the accuracy so far is not the whole epoch's: a run
    resumed from there reports the epoch's accuracy only if it counts the steps before the resume too."""
    step = next((step for step in (6, 5, 7) if running[step] != running[8]), None)
    assert step is not None, f"every step of the last epoch has the epoch's accuracy, so none tells: {running}"
    return step


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float], dict[int, float]]:
    """The run both ways of saving end as, trained once: its folder, its metrics, and its running accuracy."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    with pytest.MonkeyPatch.context() as patch:
        running = record_running_accuracy(patch)
        metrics = train.main([*TINY, "--max-epochs=2", f"--output-dir={folder}"])  # 4 steps per epoch, 8 in all
    return folder, metrics, running


@SAVING
def test_resume_last_after_ctrl_c_mid_epoch_ends_with_the_weights_and_epoch_accuracy_of_an_uninterrupted_run(
    formats: list[str],
    uninterrupted: tuple[Path, dict[str, float], dict[int, float]],
    tiny_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stopped and resumed run may save sharded, in the background: it ends as the uninterrupted one's file."""
    args = [*tiny_args, "--max-epochs=2"]  # 32 samples in batches of 8: 4 steps per epoch, 8 in all
    folder, expected_metrics, running = uninterrupted
    expected = last_checkpoint(folder)
    # The first epoch's count carried into the second would change its train/acc only if the two differ.
    assert running[8] == expected_metrics["train/acc"] != running[4], running
    at = telling_step(running)

    out = tmp_path / "stopped"
    interrupt_at(monkeypatch, at, "ctrl-c")
    with pytest.raises(SystemExit):
        train.main([*args, *formats, f"--output-dir={out}"])
    assert last_checkpoint(out)["global_step"] == at
    monkeypatch.undo()
    metrics = train.main([*args, *formats, f"--output-dir={out}", "--resume=last"])
    got = last_checkpoint(out)
    for name, weight in expected["state_dict"].items():
        assert torch.equal(got["state_dict"][name], weight), name
    for metric in ("train/loss", "train/acc", "val/loss", "val/acc", "test/loss"):
        assert metrics[metric] == expected_metrics[metric], f"Ctrl-C after step {at}: {metric}"
