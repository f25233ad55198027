"""Every way a run of any task can fail says so in one line, naming the cause and what to try, and loses nothing it
had: the toy task's runs. The image task's own inputs are tests/image_classification/test_failures.py's."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning as L
import pytest
import torch
import yaml

from lightning_gpu_engine import Config, read_checkpoint, train
from lightning_gpu_engine.testing.processes import SAVING, one_error_line

from .conftest import run_toy
from .test_monitors import FusedAdamW


def corrupt_checkpoint(tmp_path: Path) -> Path:
    (tmp_path / "cut.ckpt").write_bytes(b"PK\x03\x04 cut off mid-write")
    return tmp_path / "cut.ckpt"


def earlier_run(tmp_path: Path) -> Path:
    (tmp_path / "earlier" / "checkpoints").mkdir(parents=True)
    (tmp_path / "earlier" / "checkpoints" / "last.ckpt").write_bytes(b"")
    return tmp_path / "earlier"


# Each case: extra flags (given tmp_path) and what the one error line must say. All fail before the run starts.
BAD_INPUT: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "more devices than the machine": (
        lambda _: ["--devices", str((os.cpu_count() or 1) + 1)],
        f"--devices: {(os.cpu_count() or 1) + 1} asked for, but this machine has",
    ),
    "16-mixed on cpu": (lambda _: ["--precision", "16-mixed"], "--precision: 16-mixed needs a CUDA GPU"),
    "fsdp on cpu": (lambda _: ["--strategy", "fsdp"], "--strategy: fsdp needs CUDA GPUs, not cpu; use auto or ddp"),
    "auto batch size on two nodes": (
        lambda _: ["--auto-batch-size", "--num-nodes", "2"],
        "--auto-batch-size: searches on one device, not 2",
    ),
    "resume from nowhere": (lambda tmp: ["--resume", str(tmp / "gone.ckpt")], "--resume: no checkpoint at"),
    "resume from a damaged file": (
        lambda tmp: ["--resume", str(corrupt_checkpoint(tmp))],
        "is not a checkpoint written by torch.save (not a zip archive: truncated",
    ),
    # issue 10, item 6-9: each was a traceback, a hang or a silent wrong result
    "log every 0 steps": (lambda _: ["--log-every-n-steps", "0"], "--log-every-n-steps: must be a positive integer"),
    "negative seed": (lambda _: ["--seed", "-1"], "--seed: must be from 0 to 4294967295"),
    "seed beyond numpy": (lambda _: ["--seed", str(2**32)], "--seed: must be from 0 to 4294967295"),
    "nan clipping": (lambda _: ["--gradient-clip-val", "nan"], "--gradient-clip-val: must be a finite number"),
    "infinite lr": (lambda _: ["--lr", "inf"], "--lr: must be a finite number, got inf"),
    "nan weight decay": (lambda _: ["--weight-decay", "nan"], "--weight-decay: must be a finite number, got nan"),
    "a thousand workers": (lambda _: ["--num-workers", "1000"], "--num-workers: must be from 0 to the"),
    "checkpoint every nonsense": (
        lambda _: ["--checkpoint-every", "often"],
        "--checkpoint-every: expected e.g. '30min'",
    ),
    "checkpoint every 0 steps": (lambda _: ["--checkpoint-every", "0steps"], "--checkpoint-every: expected e.g."),
    "two nodes without a launcher": (lambda _: ["--num-nodes", "2"], "--num-nodes: 2 nodes need a launcher on each"),
    "output dir is a file": (
        lambda tmp: [f"--output-dir={tmp / 'file'}"] if (tmp / "file").write_text("x") else [],
        "is a file, not a directory",
    ),
    "output dir under a file": (
        lambda tmp: [f"--output-dir={tmp / 'file' / 'run'}"] if (tmp / "file").write_text("x") else [],
        "cannot be created: ",
    ),
    "output dir in a read-only place": (lambda _: ["--output-dir=/proc/run"], "--output-dir: cannot write in /proc"),
    "output dir of another run, no --resume": (
        lambda tmp: [f"--output-dir={earlier_run(tmp)}"],
        "already holds a run (",
    ),
    "fewer samples than a batch": (
        lambda _: ["--samples", "7"],
        "--batch-size: 8 is more than the 7 training samples: nothing would be trained",
    ),
}


# What the engine does not check for every task yet (strict: a fix shows as a failure, and this entry goes)
NOT_YET = {"fewer samples than a batch": "check_enough_data is left to each task: the toy trains nothing, exits 0"}
CASES = [
    pytest.param(c, marks=[pytest.mark.xfail(strict=True, reason=why) for why in [NOT_YET.get(c)] if why])
    for c in BAD_INPUT
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_exit_2_and_leaves_no_output_dir(
    case: str,
    toy: ModuleType,
    tiny_args: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flags, expected = BAD_INPUT[case]
    for launcher in ("SLURM_NTASKS", "SLURM_JOB_NAME", "TORCHELASTIC_RUN_ID", "NODE_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(launcher, raising=False)  # as on a plain machine, even where the tests run under one
    with pytest.raises(SystemExit) as exit_info:
        train(toy.TASK, [*tiny_args, *flags(tmp_path)])
    assert exit_info.value.code == 2
    assert expected in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_hardware_errors_found_after_importing_torch_are_still_one_line_in_a_real_process(
    my_task: Path, tiny_args: list[str], tmp_path: Path
) -> None:
    result = run_toy(my_task, *tiny_args, "--precision=16-mixed")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --precision: 16-mixed needs a CUDA GPU, not cpu; use bf16-mixed or 32-true"
    ]
    assert not (tmp_path / "run").exists()


def poison_loss_from_step(monkeypatch: pytest.MonkeyPatch, toy: ModuleType, step: int) -> None:
    shared_step = toy.Regressor.shared_step

    def poisoned(self: L.LightningModule, batch: Any, stage: str) -> torch.Tensor:
        loss = shared_step(self, batch, stage)
        return loss * float("nan") if stage == "train" and self.global_step >= step else loss

    monkeypatch.setattr(toy.Regressor, "shared_step", poisoned)


def test_nan_loss_stops_naming_the_step_and_remedies_and_keeps_the_last_good_checkpoint(
    toy: ModuleType,
    tiny_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    poison_loss_from_step(monkeypatch, toy, 5)  # the sixth of eight steps, in the second epoch
    with pytest.raises(SystemExit) as exit_info:
        train(toy.TASK, [*tiny_args, "--max-epochs=2"])
    assert exit_info.value.code == 1
    line = one_error_line(capsys)
    assert line.startswith("error: the training loss became nan or inf at step 6;")
    lr = toy.TASK.defaults.get("lr", Config().lr)  # the task's own default, else the engine's
    assert "last good checkpoint" in line and f"--lr (now {lr:g})" in line and "--precision bf16-mixed" in line
    for checkpoint in (tmp_path / "run" / "checkpoints").glob("*.ckpt"):
        saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
        assert saved["global_step"] == 4, checkpoint.name  # the end of the first epoch, before the nan
        assert all(torch.isfinite(w).all() for w in saved["state_dict"].values() if w.is_floating_point())


@SAVING
def test_a_checkpoint_due_at_the_nan_step_is_refused_and_the_advice_works(
    formats: list[str], my_task: Path, tiny_args: list[str], tmp_path: Path
) -> None:
    """A save every step comes before that step's loss is checked; the weights themselves decide."""
    diverging = run_toy(
        my_task, *tiny_args, *formats, "--max-epochs=100", "--max-steps=20", "--lr=1e8", "--checkpoint-every=1steps"
    )
    assert diverging.returncode == 1, diverging.stderr[-3000:]
    saves = list((tmp_path / "run" / "checkpoints").glob("*.ckpt"))
    assert saves, "the steps before the nan were saved"
    for checkpoint in saves:
        saved = read_checkpoint(checkpoint)
        assert all(torch.isfinite(w).all() for w in saved["state_dict"].values() if w.is_floating_point())
    assert "Traceback" not in diverging.stderr
    [line] = [line for line in diverging.stderr.splitlines() if line.startswith("error: ")]
    assert " became nan or inf at step " in line and "Start again in another --output-dir with a lower --lr" in line
    advised = [*tiny_args, *formats, f"--output-dir={tmp_path / 'again'}", "--lr=0.002", "--checkpoint-every=1steps"]
    assert run_toy(my_task, *advised).returncode == 0


def test_the_advised_clipping_runs_in_bf16_mixed_with_the_fused_adamw_of_cuda_and_clips_every_step(
    toy: ModuleType, tiny_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning refuses to clip for a fused optimizer under any mixed precision, bf16's too, which scales nothing:
    the language model's default clipping stopped every bf16 run on a GPU at its first step."""
    monkeypatch.setattr(torch.optim, "AdamW", FusedAdamW)
    clip, clipped_at = torch.nn.utils.clip_grad_norm_, []

    def counted(parameters: Any, max_norm: float, *args: Any, **kwargs: Any) -> torch.Tensor:
        clipped_at.append(max_norm)
        return clip(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", counted)
    train(toy.TASK, [*tiny_args, "--precision=bf16-mixed", "--gradient-clip-val=1.0"])
    assert clipped_at == [1.0] * 4  # each of the 4 steps


def test_out_of_memory_names_the_batch_size_and_how_to_lower_it(
    toy: ModuleType, tiny_args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def out_of_memory(self: L.LightningModule, batch: Any, batch_idx: int) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(toy.Regressor, "training_step", out_of_memory)
    with pytest.raises(SystemExit) as exit_info:
        train(toy.TASK, tiny_args)
    assert exit_info.value.code == 1
    line = one_error_line(capsys)
    assert line.startswith("error: --batch-size: out of memory with 8 samples per device; lower it")
    assert "--batch-size 4 --accumulate-grad-batches 2 keeps the global batch" in line


def test_auto_batch_size_finds_the_largest_that_fits_and_records_it(
    toy: ModuleType,
    tiny_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    training_step = toy.Regressor.training_step

    def memory_for_8(self: L.LightningModule, batch: Any, batch_idx: int) -> Any:
        if batch[0].shape[0] > 8:  # what the finder sees on a GPU: the error CUDA raises
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return training_step(self, batch, batch_idx)

    monkeypatch.setattr(toy.Regressor, "training_step", memory_for_8)
    train(toy.TASK, [*tiny_args, "--auto-batch-size", "--batch-size=4"])
    assert "auto batch size: 8 per device fits (started from 4)" in capsys.readouterr().out
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["batch_size"] == 8
