"""Checkpoints on disk: only this run's are resumed from, and saving one never destroys the previous one."""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from lightning_gpu_engine import train
from lightning_gpu_engine.testing.processes import edited

from .conftest import TOY, run_toy


@pytest.fixture(scope="module")
def real_checkpoint(toy: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A last.ckpt as the engine writes it: one epoch of the toy task."""
    out = tmp_path_factory.mktemp("real") / "run"
    train(toy.TASK, [*TOY, "--max-epochs=1", f"--output-dir={out}"])
    return out / "checkpoints" / "last.ckpt"


def with_hparam(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda checkpoint: checkpoint["hyper_parameters"].__setitem__(key, value)


def raw(data: bytes) -> Callable[[Path, Path], Path]:
    def write(real: Path, tmp: Path) -> Path:
        (tmp / "raw.ckpt").write_bytes(data)
        return tmp / "raw.ckpt"

    return write


def legacy(real: Path, tmp: Path) -> Path:
    torch.save({"state_dict": {}}, tmp / "legacy.ckpt", _use_new_zipfile_serialization=False)
    return tmp / "legacy.ckpt"


def narrower_first_layer(checkpoint: dict[str, Any]) -> None:
    checkpoint["state_dict"].update({k: v[:32] for k, v in checkpoint["state_dict"].items() if k.startswith("net.0.")})


# Each case: how to make the file from a real checkpoint, the flags of the resuming run, what the one line says.
CASES: dict[str, tuple[Callable[[Path, Path], Path], list[str], str]] = {
    "an _instantiator to import and run": (
        lambda real, tmp: edited(real, tmp, with_hparam("_instantiator", "os.system")),
        [],
        "names an _instantiator ('os.system') that loading would import and run; refusing it",
    ),
    "another value of a task option": (lambda real, tmp: real, ["--hidden=32"], "trained with 64, not 32"),
    "weights of another shape": (
        lambda real, tmp: edited(real, tmp, narrower_first_layer),
        [],
        "is for another network: weights differ (net.0.weight: (32, 8) vs (64, 8))",
    ),
    "a dict that is not a checkpoint": (
        lambda real, tmp: edited(real, tmp, lambda c: {"hello": 1}),
        [],
        "is not a Lightning training checkpoint (no state_dict, global_step, loops, optimizer_states)",
    ),
    "a bare tensor": (
        lambda real, tmp: edited(real, tmp, lambda c: torch.zeros(3)),
        [],
        "is not a Lightning training checkpoint (a Tensor)",
    ),
    "an empty file": (raw(b""), [], "is empty (0 bytes)"),
    "random bytes": (raw(bytes(range(256)) * 4), [], "is not a checkpoint written by torch.save (not a zip archive"),
    "a legacy pickle": (legacy, [], "is not a checkpoint written by torch.save (not a zip archive"),
    "a plain pickle": (raw(pickle.dumps({"state_dict": {}})), [], "not a zip archive"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_checkpoint_that_is_not_this_runs_is_refused_in_one_line(
    case: str, toy: ModuleType, real_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, flags, expected = CASES[case]
    path = make(real_checkpoint, tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        train(toy.TASK, [*TOY, f"--output-dir={tmp_path / 'run'}", f"--resume={path}", *flags])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    blamed = flags[0].split("=")[0] if flags else "--resume"  # the flag that differs from the checkpoint, if any
    assert len(lines) == 1 and lines[0].startswith(f"error: {blamed}: "), lines
    assert expected in lines[0]
    assert not (tmp_path / "run").exists()


def test_resume_auto_through_the_command_line_continues_a_requeued_run(my_task: Path, tmp_path: Path) -> None:
    """What scripts/slurm.sbatch passes on every (re)start: the first start trains afresh, the next continues."""
    out = tmp_path / "run"
    first = run_toy(my_task, *TOY, "--max-epochs=1", f"--output-dir={out}", "--resume", "auto")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "resume: auto" in (out / "config.yaml").read_text()
    second = run_toy(my_task, *TOY, "--max-epochs=2", f"--output-dir={out}", "--resume", "auto")
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"Restoring states from the checkpoint path at {out / 'checkpoints' / 'last.ckpt'}" in second.stderr
    assert torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["global_step"] == 8


def test_a_full_disk_is_one_line_naming_the_directory_and_bytes_and_keeps_the_previous_checkpoint(
    toy: ModuleType,
    tiny_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    real_save = torch.save

    def disk_fills_after_step_4(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(obj, dict) and obj.get("global_step", 0) > 4:  # the second epoch's saves
            f.write(b"\0" * 4096)  # what fits before the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_fills_after_step_4)
    with pytest.raises(SystemExit) as exit_info:
        train(toy.TASK, [*tiny_args, "--max-epochs=2"])
    assert exit_info.value.code == 1
    output = capsys.readouterr().err
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in output and len(errors) == 1, output[-3000:]
    err = errors[0]
    folder = tmp_path / "run" / "checkpoints"
    assert err.startswith(f"error: --output-dir: no space left in {folder} to save ")
    assert " MiB (" in err and " bytes), " in err and "the previous checkpoint is untouched" in err
    needed = int(err.split(" MiB (")[1].split(" bytes")[0])
    previous = torch.load(folder / "last.ckpt", map_location="cpu", weights_only=True)
    assert previous["global_step"] == 4
    weights = sum(t.numel() * t.element_size() for t in previous["state_dict"].values())
    assert needed > 3 * weights, "the weights and AdamW's two moments at least"
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no partial file left


# A SLURM job step as srun starts it: Lightning detects SLURM from these alone.
SLURM = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "4242", "SLURM_PROCID": "0"}
SLURM |= {"SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS_PER_NODE": "1"}


def run_under_slurm(my_task: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_toy(my_task, *TOY, *args, env=SLURM)


def test_a_stale_hpc_checkpoint_counts_as_a_run_and_is_never_what_the_test_scores(
    my_task: Path, tmp_path: Path
) -> None:
    """Under SLURM Lightning resumes and tests from the newest hpc_ckpt_N.ckpt wherever it is given no path."""
    out = tmp_path / "run"
    first = run_under_slurm(my_task, "--max-steps=2", f"--output-dir={out}")  # half an epoch: no validation, no best
    assert first.returncode == 0, first.stderr[-3000:]
    last, stale = out / "checkpoints" / "last.ckpt", out / "hpc_ckpt_1.ckpt"
    os.replace(last, stale)  # a pre-emption save alone: Lightning would continue from it, unasked

    fresh = run_under_slurm(my_task, "--max-steps=2", f"--output-dir={out}")
    assert fresh.returncode == 2, fresh.stderr[-3000:]
    assert fresh.stderr.strip().splitlines() == [
        f"error: --output-dir: {out} already holds a run ({stale}); continue it with --resume auto, "
        "or give another --output-dir"
    ]

    shutil.copy(stale, last)
    os.utime(stale, (1, 1))  # as a SIGUSR1 save that was not requeued leaves it: older than the run's last.ckpt
    resumed = run_under_slurm(my_task, "--max-steps=3", f"--output-dir={out}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert str(stale) not in resumed.stderr  # Lightning names every checkpoint it loads
    assert f"Loaded model weights from the checkpoint at {last}" in resumed.stderr  # the final weights, step 3
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 3
    assert "no validation ran (training ended at step 3, before the first epoch's end)" in resumed.stdout
