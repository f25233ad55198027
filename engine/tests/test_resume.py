"""Stopping and resuming: bit-exact continuation (weights and epoch metrics), a checkpoint on Ctrl-C and SIGTERM, and
only safe checkpoints. The image task's own epoch metrics are tests/image_classification/test_resume.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, SequentialSampler, TensorDataset
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassAUROC

from lightning_gpu_engine import train
from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.data.loaders import (
    ResumableLoader,
    SkippingBatchSampler,
)
from lightning_gpu_engine.perf import hardware
from lightning_gpu_engine.testing import warm_starts
from lightning_gpu_engine.trainer.trainer import build_trainer


def last_checkpoint(output_dir: Path) -> dict[str, Any]:
    return torch.load(output_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def interrupt_at(monkeypatch: pytest.MonkeyPatch, toy: ModuleType, step: int, interruption: str) -> None:
    """Ctrl-C during optimizer step `step`, as a user gives it (the run saves once the step is done), or a crash once
    the step is done, which leaves no time to save."""

    def on_train_batch_start(self: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if self.global_step == step - 1 and interruption == "ctrl-c":
            os.kill(os.getpid(), signal.SIGINT)

    def on_train_batch_end(self: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step == step and interruption == "crash":
            raise RuntimeError("crash")

    monkeypatch.setattr(toy.Regressor, "on_train_batch_start", on_train_batch_start)
    monkeypatch.setattr(toy.Regressor, "on_train_batch_end", on_train_batch_end, raising=False)


def test_resume_last_after_ctrl_c_or_a_crash_ends_with_the_weights_and_metrics_of_an_uninterrupted_run(
    toy: ModuleType, tiny_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [*tiny_args, "--max-epochs=2"]  # 32 samples in batches of 8: 4 steps per epoch, 8 in all
    expected_metrics = train(toy.TASK, [*args, f"--output-dir={tmp_path / 'uninterrupted'}"])
    expected = last_checkpoint(tmp_path / "uninterrupted")

    # Ctrl-C saves mid-epoch, after step 6; a crash there leaves the checkpoint of the first epoch's end, and a crash
    # after step 7 with --checkpoint-every 6 steps the periodic one of step 6.
    scenarios = [("ctrl-c", 6, "off", 6), ("crash", 6, "off", 4), ("crash", 7, "6steps", 6)]
    for interruption, at_step, every, resumes_from_step in scenarios:
        out = tmp_path / f"{interruption}-{every}"
        interrupt_at(monkeypatch, toy, at_step, interruption)
        with pytest.raises((SystemExit, RuntimeError)) as stopped:
            train(toy.TASK, [*args, f"--output-dir={out}", f"--checkpoint-every={every}"])
        if interruption == "ctrl-c":
            assert isinstance(stopped.value, SystemExit) and stopped.value.code == 128 + signal.SIGINT
        assert last_checkpoint(out)["global_step"] == resumes_from_step
        monkeypatch.undo()
        metrics = train(toy.TASK, [*args, f"--output-dir={out}", "--resume=last", f"--checkpoint-every={every}"])
        assert [p.name for p in (out / "logs").iterdir()] == ["version_0"]  # the resumed run logs on in the same run

        got = last_checkpoint(out)
        assert got["global_step"] == expected["global_step"] == 8
        for name, weight in expected["state_dict"].items():
            assert torch.equal(got["state_dict"][name], weight), f"{interruption}: {name}"
        for metric in ("train/loss", "val/loss", "test/loss"):  # train/loss: the last step's, so its batch too
            assert metrics[metric] == expected_metrics[metric], f"{interruption} after step {at_step}: {metric}"


class Scorer(L.LightningModule):
    """A team's own task on the same engine: epoch metrics with sum states (a mean) and list states (an AUROC over
    every prediction), and validation twice an epoch. Notes the epoch's metrics so far every fourth step, and the
    validation's at its end."""

    def __init__(self, crash_after: int | None = None) -> None:
        super().__init__()
        self.net = nn.Linear(4, 3)
        self.train_loss, self.train_auroc = MeanMetric(), MulticlassAUROC(3, thresholds=None)
        self.val_loss, self.val_acc = MeanMetric(), MulticlassAccuracy(3)
        self.crash_after = crash_after
        self.running: dict[int, dict[str, float]] = {}

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        logits = self.net(batch[0])
        loss = F.cross_entropy(logits, batch[1])
        self.train_loss.update(loss)
        self.train_auroc.update(logits, batch[1])  # no AUROC of the batch alone, which may lack a class
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True)
        self.log("train/auroc", self.train_auroc, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        logits = self.net(batch[0])
        self.val_loss.update(F.cross_entropy(logits, batch[1]))
        self.val_acc.update(logits, batch[1])
        self.log("val/loss", self.val_loss)  # what the engine's ModelCheckpoint monitors without a task
        self.log("val/acc", self.val_acc)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step % 4 == 0:  # 16 samples or more: every class is in, as an AUROC needs
            self.running[self.global_step] = {"train/loss": float(self.train_loss.compute())}
            self.running[self.global_step]["train/auroc"] = float(self.train_auroc.compute())
        if self.global_step == self.crash_after:
            raise RuntimeError("crash")

    def on_validation_epoch_end(self) -> None:
        self.running.setdefault(self.global_step, {})["val/loss"] = float(self.val_loss.compute())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def fit_scorer(scorer: Scorer, output_dir: Path, resume: bool = False) -> dict[str, float]:
    """Two epochs of 8 steps through build_trainer, as train.py builds it, validating after steps 4 and 8."""
    data = torch.randn(48, 4, generator=torch.Generator().manual_seed(0))
    labels = (data[:, :3] + torch.randn(48, 3, generator=torch.Generator().manual_seed(1))).argmax(1)
    train_set, val_set = TensorDataset(data[:32], labels[:32]), TensorDataset(data[32:], labels[32:])
    train_loader = ResumableLoader(train_set, batch_sampler=SkippingBatchSampler(SequentialSampler(train_set), 4, True))
    cfg = Config(
        accelerator="cpu",
        precision="32-true",
        strategy="auto",
        logger="csv",
        log_every_n_steps=1,
        max_epochs=2,
        output_dir=str(output_dir),
    )
    trainer = build_trainer(cfg, hardware.resolve(cfg), val_check_interval=0.5)
    last = output_dir / "checkpoints" / "last.ckpt"
    trainer.fit(scorer, train_loader, DataLoader(val_set, batch_size=8), ckpt_path=last if resume else None)
    return {name: float(value) for name, value in trainer.callback_metrics.items()}


def test_a_teams_own_module_resumed_mid_epoch_reports_the_epoch_metrics_of_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    whole = Scorer()
    expected = fit_scorer(whole, tmp_path / "uninterrupted")
    running = whole.running
    # Each comparison below could only pass by chance if the counts it would wrongly mix were alike.
    for metric in ("train/loss", "train/auroc"):
        assert len({running[8][metric], running[12][metric], running[16][metric]}) == 3, metric
    assert running[12]["val/loss"] != running[16]["val/loss"]

    # A crash after step 14 leaves the checkpoint of the validation after step 12: the epoch's training metrics so
    # far must come back, the validation's must not be added to the next one. A crash after step 10 leaves that of
    # step 8, the first epoch's end: its counts must not be added to the second epoch's.
    for crash_after, saved_at in ((14, 12), (10, 8)):
        out = tmp_path / f"crash-after-{crash_after}"
        torch.manual_seed(0)
        with pytest.raises(RuntimeError, match="crash"):
            fit_scorer(Scorer(crash_after), out)
        assert last_checkpoint(out)["global_step"] == saved_at
        got = fit_scorer(Scorer(), out, resume=True)
        for metric in ("train/loss", "train/auroc", "val/loss", "val/acc"):
            assert got[metric] == expected[metric], f"resumed from step {saved_at}: {metric}"


def test_sigterm_from_outside_saves_a_checkpoint_and_resume_last_continues(
    toy: ModuleType, my_task: Path, tiny_args: list[str], tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(my_task), *tiny_args, "--max-epochs=1000"]
    proc = warm_starts.popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=my_task.parent, env=env
    )
    watchdog = threading.Timer(240, proc.kill)  # a hung run fails the test instead of blocking it
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # training has started once the stop hint is printed
            if "--resume last continues" in line:
                proc.send_signal(signal.SIGTERM)
                break
        output = proc.communicate()[0]
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert "Traceback" not in output
    assert "stopped by SIGTERM at step" in output and "continue with --resume last" in output

    saved = last_checkpoint(tmp_path / "run")
    assert saved["global_step"] >= 1
    train(toy.TASK, [*tiny_args, f"--max-epochs={saved['epoch'] + 2}", "--resume=last"])
    assert last_checkpoint(tmp_path / "run")["global_step"] == 4 * (saved["epoch"] + 2)


class RunsCode:
    """What an attacker would put in a checkpoint: unpickling it calls a function, here one that leaves a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_a_checkpoint_carrying_a_pickled_object_is_refused_without_running_it(
    toy: ModuleType, tiny_args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "code-ran"
    torch.save({"state_dict": {}, "payload": RunsCode(marker)}, tmp_path / "evil.ckpt")
    with pytest.raises(SystemExit) as refused:
        train(toy.TASK, [*tiny_args, f"--resume={tmp_path / 'evil.ckpt'}"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --resume: ") and "\n" not in err
    assert "evil.ckpt holds a pickled " in err and "refusing to unpickle it" in err
    assert not marker.exists()
    assert not (tmp_path / "run").exists()
