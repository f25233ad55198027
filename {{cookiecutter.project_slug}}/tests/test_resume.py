"""Stopping and resuming: bit-exact continuation, a checkpoint on Ctrl-C and SIGTERM, and only safe checkpoints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT

import train
from {{ cookiecutter.package_name }}.model import ImageClassifier


def last_checkpoint(output_dir: Path) -> dict[str, Any]:
    return torch.load(output_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def interrupt_at(monkeypatch: pytest.MonkeyPatch, step: int, interruption: str) -> None:
    """Once `step` optimizer steps are done: Ctrl-C, as a user gives it, or a crash that leaves no time to save."""

    def on_train_batch_end(self: ImageClassifier, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step == step and interruption == "ctrl-c":
            os.kill(os.getpid(), signal.SIGINT)
        if self.global_step == step and interruption == "crash":
            raise RuntimeError("crash")

    monkeypatch.setattr(ImageClassifier, "on_train_batch_end", on_train_batch_end, raising=False)


def test_resume_last_after_ctrl_c_or_a_crash_ends_with_the_weights_and_losses_of_an_uninterrupted_run(
    tiny_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [*tiny_args, "--max-epochs=2"]  # 32 samples in batches of 8: 4 steps per epoch, 8 in all
    expected_metrics = train.main([*args, f"--output-dir={tmp_path / 'uninterrupted'}"])
    expected = last_checkpoint(tmp_path / "uninterrupted")

    # Ctrl-C saves mid-epoch, after step 6; a crash there leaves the checkpoint of the first epoch's end, and a crash
    # after step 7 with --checkpoint-every 3steps the periodic one of step 6.
    scenarios = [("ctrl-c", 6, "off", 6), ("crash", 6, "off", 4), ("crash", 7, "3steps", 6)]
    for interruption, at_step, every, resumes_from_step in scenarios:
        out = tmp_path / f"{interruption}-{every}"
        interrupt_at(monkeypatch, at_step, interruption)
        with pytest.raises((SystemExit, RuntimeError)) as stopped:
            train.main([*args, f"--output-dir={out}", f"--checkpoint-every={every}"])
        if interruption == "ctrl-c":
            assert isinstance(stopped.value, SystemExit) and stopped.value.code == 128 + signal.SIGINT
        assert last_checkpoint(out)["global_step"] == resumes_from_step
        monkeypatch.undo()
        metrics = train.main([*args, f"--output-dir={out}", "--resume=last", f"--checkpoint-every={every}"])
        assert [p.name for p in (out / "logs").iterdir()] == ["version_0"]  # the resumed run logs on in the same run

        got = last_checkpoint(out)
        assert got["global_step"] == expected["global_step"] == 8
        for name, weight in expected["state_dict"].items():
            assert torch.equal(got["state_dict"][name], weight), f"{interruption}: {name}"
        for metric in ("train/loss", "train/acc", "val/loss", "val/acc", "test/loss"):
            assert metrics[metric] == expected_metrics[metric], f"{interruption}: {metric}"


def test_sigterm_from_outside_saves_a_checkpoint_and_resume_last_continues(
    tiny_args: list[str], tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(ROOT / "train.py"), *tiny_args, "--max-epochs=1000"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
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
    train.main([*tiny_args, f"--max-epochs={saved['epoch'] + 2}", "--resume=last"])
    assert last_checkpoint(tmp_path / "run")["global_step"] == 4 * (saved["epoch"] + 2)


class RunsCode:
    """What an attacker would put in a checkpoint: unpickling it calls a function, here one that leaves a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_a_checkpoint_carrying_a_pickled_object_is_refused_without_running_it(
    tiny_args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "code-ran"
    torch.save({"state_dict": {}, "payload": RunsCode(marker)}, tmp_path / "evil.ckpt")
    with pytest.raises(SystemExit) as refused:
        train.main([*tiny_args, f"--resume={tmp_path / 'evil.ckpt'}"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --resume: ") and "\n" not in err
    assert "evil.ckpt holds a pickled " in err and "refusing to unpickle it" in err
    assert not marker.exists()
    assert not (tmp_path / "run").exists()
