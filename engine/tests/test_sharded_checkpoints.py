"""--checkpoint-format sharded and --async-save through my_task.py's command line: a stop to the process group and a
kill -9 during a background write both resume to the weights of an uninterrupted run, a checkpoint's name is never
on a half-written folder, and nan weights are never saved. Two DDP ranks: tests/test_distributed.py; FSDP2:
tests/language_model/test_language_model.py."""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from lightning_gpu_engine import read_checkpoint, train
from lightning_gpu_engine.checkpoint.sharded_read import read_sharded
from lightning_gpu_engine.testing.processes import wait_until
from lightning_gpu_engine.trainer import trainer as trainer_module

from .conftest import TOY, run_toy, signalling_task
from .test_stops import Run, runs  # noqa: F401  # runs: the fixture that reaps what a test started

SHARDED = ["--checkpoint-format=sharded"]
MODES = {"sharded": SHARDED, "sharded-async": [*SHARDED, "--async-save"]}


def assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name, weight in want.items():
        assert torch.equal(got[name], weight), name


def test_a_group_sigterm_mid_epoch_then_resume_last_ends_as_the_uninterrupted_file_run(
    my_task: Path, tmp_path: Path
) -> None:
    """Written in the foreground; --async-save's stop and resume is the conformance suite's (testing/conformance.py)."""
    mode = "sharded"
    args = [*TOY, "--max-epochs=2", "--checkpoint-every=off"]  # 4 steps an epoch, 8 in all
    whole = run_toy(my_task, *args, f"--output-dir={tmp_path / 'whole'}")  # one file, the default
    assert whole.returncode == 0, whole.stderr[-3000:]
    want = read_checkpoint(tmp_path / "whole" / "checkpoints" / "last.ckpt")

    out = tmp_path / "run"
    script = signalling_task(
        tmp_path / "stopping.py", my_task, "on_train_batch_end(self, trainer, *args)", "trainer.global_step == 6"
    )
    stopped = run_toy(script, *args, *MODES[mode], f"--output-dir={out}", new_session=True)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr and "saved" in stopped.stderr
    last = out / "checkpoints" / "last.ckpt"
    assert last.is_symlink() and (last / "meta.pt").is_file() and (last / ".metadata").is_file()
    halfway = read_checkpoint(last)
    assert 6 <= halfway["global_step"] < 8  # mid-epoch, in the second
    assert not all(torch.equal(halfway["state_dict"][k], w) for k, w in want["state_dict"].items()), "not the end"

    resumed = run_toy(my_task, *args, *MODES[mode], f"--output-dir={out}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = read_checkpoint(last)
    assert got["global_step"] == want["global_step"] == 8
    assert_same_weights(got["state_dict"], want["state_dict"])
    assert_same_weights(got["optimizer_states"][0]["state"][0], want["optimizer_states"][0]["state"][0])
    summary = [line for line in resumed.stdout.splitlines() if line.startswith(("best ", "last "))]
    expected = [line for line in whole.stdout.splitlines() if line.startswith(("best ", "last "))]
    assert [s.split("train throughput")[0] for s in summary] == [e.split("train throughput")[0] for e in expected]
    # one folder per checkpoint name, each the one its link points at: nothing left over from the earlier saves
    folders = sorted(p.name for p in last.parent.iterdir() if p.is_dir() and not p.is_symlink())
    assert folders == sorted(os.readlink(p) for p in last.parent.iterdir() if p.is_symlink())


def in_flight(folder: Path) -> Path | None:
    """A sharded save of last.ckpt being written: its folder exists, and the name points elsewhere."""
    last = folder / "last.ckpt"
    if not last.is_symlink():
        return None
    pointed = os.readlink(last)
    return next((p for p in folder.glob(".last.ckpt.shards-*") if p.name != pointed), None)


def test_kill_9_during_a_background_write_leaves_the_previous_checkpoint_and_resume_ends_as_uninterrupted(
    my_task: Path,
    runs: list[Run],  # noqa: F811  # the fixture imported above
    tmp_path: Path,
) -> None:
    # A wider network (4.2M parameters, 50 MB a checkpoint with AdamW's moments) written after every step: a save is
    # nearly always in flight
    args = [*TOY, "--hidden=2048", "--samples=4096", "--max-epochs=1", "--max-steps=30", "--checkpoint-every=1steps"]
    out = tmp_path / "run"
    run = Run(my_task, *args, *MODES["sharded-async"], f"--output-dir={out}")
    runs.append(run)
    run.wait_for("epoch 1/1  batch 1/")
    writing = wait_until(lambda: in_flight(out / "checkpoints"), run.process, "a save seen in flight", every=0.002)
    assert writing is not None  # wait_until returns the first true value
    run.kill()  # SIGKILL to the whole group, writer thread and all, mid-write
    assert run.process.wait() == -signal.SIGKILL
    last = out / "checkpoints" / "last.ckpt"
    kept = read_checkpoint(last)  # whole and loadable: the name still points at the save before
    assert os.readlink(last) != writing.name or (writing / ".metadata").is_file()
    assert 1 <= kept["global_step"] < 30

    resumed = run_toy(my_task, *args, *MODES["sharded-async"], f"--output-dir={out}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not writing.exists(), "the half-written folder was removed by the next save of the same name"
    whole = run_toy(my_task, *args, f"--output-dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-3000:]
    want = read_checkpoint(tmp_path / "whole" / "checkpoints" / "last.ckpt")
    got = read_checkpoint(last)
    assert got["global_step"] == want["global_step"] == 30
    assert_same_weights(got["state_dict"], want["state_dict"])


class Planted:
    """What a planted checkpoint carries: unpickling it would make a folder, standing for any code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.mkdir, (str(self.marker),)


def plant_in_meta(folder: Path, payload: Planted) -> None:
    saved = torch.load(folder / "meta.pt", weights_only=True)
    torch.save({**saved, "payload": payload}, folder / "meta.pt")


def plant_in_index(folder: Path, payload: Planted) -> None:
    """In DCP's own `.metadata`, which torch.distributed.checkpoint unpickles with plain pickle."""
    index = pickle.loads((folder / ".metadata").read_bytes())  # the run's own file: trusted here
    index.planner_data["payload"] = payload
    (folder / ".metadata").write_bytes(pickle.dumps(index))


@pytest.mark.parametrize("plant", [plant_in_meta, plant_in_index], ids=["meta.pt", ".metadata"])
def test_a_sharded_checkpoint_holding_code_is_refused_without_running_it(
    plant: Callable[[Path, Planted], None], my_task: Path, tmp_path: Path
) -> None:
    out, marker = tmp_path / "run", tmp_path / "ran"
    first = run_toy(my_task, *TOY, "--max-steps=2", *SHARDED, f"--output-dir={out}")
    assert first.returncode == 0, first.stderr[-3000:]
    plant(out / "checkpoints" / "last.ckpt", Planted(marker))
    resumed = run_toy(my_task, *TOY, "--max-steps=4", *SHARDED, f"--output-dir={out}", "--resume=last")
    assert resumed.returncode == 2
    assert resumed.stderr.strip().splitlines() == [
        f"error: --resume: {out / 'checkpoints' / 'last.ckpt'} holds a pickled posix.mkdir, not just tensors "
        "and plain values; refusing to unpickle it"
    ]
    assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError):  # the front door tools read checkpoints through
        read_checkpoint(out / "checkpoints" / "last.ckpt")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--async-save"], "error: --async-save: writes sharded checkpoints only: add --checkpoint-format sharded"),
        (["--checkpoint-format=folder"], "error: --checkpoint-format: 'folder' is not one of: file, sharded"),
    ],
)
def test_bad_checkpoint_options_are_one_line(flags: list[str], message: str, my_task: Path, tmp_path: Path) -> None:
    result = run_toy(my_task, *TOY, *flags, f"--output-dir={tmp_path / 'run'}")
    assert result.returncode == 2 and result.stderr.strip() == message
    assert not (tmp_path / "run").exists()


def test_sharded_under_a_tasks_own_lightning_strategy_is_refused_in_one_line(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning's own DDP saves on rank 0 alone, and DCP's save there waited for rank 1 forever at the first save."""
    own = dataclasses.replace(toy.TASK, lightning_strategy="ddp_find_unused_parameters_true")
    out = tmp_path / "run"
    # here, in pytest's process, Lightning would start rank 1 by running pytest again
    monkeypatch.setattr(trainer_module, "build_trainer", lambda *a, **k: pytest.fail("not refused: trainer built"))
    with pytest.raises(SystemExit) as exit_info:
        train(own, [*TOY, "--devices=2", *SHARDED, f"--output-dir={out}"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --checkpoint-format: sharded is written by the engine's own DDP and FSDP2; this task runs Lightning's "
        "'ddp_find_unused_parameters_true' strategy (Task.lightning_strategy), which saves from rank 0 alone: use "
        "--checkpoint-format file"
    )
    assert not out.exists()


def test_a_sharded_checkpoint_of_another_network_is_refused_by_its_shapes(my_task: Path, tmp_path: Path) -> None:
    """Checked before a resume from the index's shapes alone (no rank reads the shards for it), as a file's are."""
    out = tmp_path / "run"
    first = run_toy(my_task, *TOY, "--max-steps=2", "--hidden=8", *SHARDED, f"--output-dir={out}")
    assert first.returncode == 0, first.stderr[-3000:]
    last = out / "checkpoints" / "last.ckpt"
    resume = [*TOY, "--max-steps=4", "--hidden=16", *SHARDED, f"--output-dir={out}", "--resume=last"]
    resumed = run_toy(my_task, *resume)
    assert resumed.returncode == 2
    assert resumed.stderr.strip().startswith("error: --hidden: the checkpoint was trained with 8, not 16;")
    peek, whole = read_sharded(last, tensors=False), read_checkpoint(last)
    assert {k: (v.shape, v.dtype) for k, v in peek["state_dict"].items() if v.is_meta} == {
        k: (v.shape, v.dtype) for k, v in whole["state_dict"].items()
    }
    assert [g["weight_decay"] for g in peek["optimizer_states"][0]["param_groups"]] == [0.05, 0.0]  # read, not shaped
    # Without the options it recorded (a checkpoint from elsewhere), its weights' shapes show it
    saved = torch.load(last / "meta.pt", weights_only=True)
    del saved["run_record"], saved["hyper_parameters"]["hidden"]
    torch.save(saved, last / "meta.pt")
    resumed = run_toy(my_task, *resume)
    assert resumed.returncode == 2
    assert resumed.stderr.strip() == (
        f"error: --resume: {last} is for another network: weights differ (net.0.weight: (8, 8) vs (16, 8)); "
        "resume with the options it was trained with, or start afresh in another --output-dir"
    )


def test_a_sharded_run_resumed_with_one_file_checkpoints_leaves_no_shard_folder_behind(
    toy: ModuleType, tmp_path: Path
) -> None:
    """The file takes the name over from the link: the folder the link pointed at went nowhere, a model's weights and
    optimizer state (134 MB on ResNet-18) for good."""
    out = tmp_path / "run"
    train(toy.TASK, [*TOY, "--max-steps=2", *SHARDED, f"--output-dir={out}"])
    assert list((out / "checkpoints").glob(".last.ckpt.shards-*")), "the sharded run's folder"
    resumed = [*TOY, "--max-steps=4", "--checkpoint-format=file", f"--output-dir={out}", "--resume=last"]
    metrics = train(toy.TASK, resumed)
    assert "test/loss" in metrics
    last = out / "checkpoints" / "last.ckpt"
    assert last.is_file() and not last.is_symlink() and read_checkpoint(last)["global_step"] == 4
    assert [p.name for p in (out / "checkpoints").iterdir() if p.name.startswith(".")] == []


def cut(file: Path) -> None:
    os.truncate(file, file.stat().st_size // 2)


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {  # what is done to the folder, what the line says
    "a shard cut short": (lambda f: cut(f / "__0_0.distcp"), r"its shard __0_0.distcp has \d+ bytes where .*cut short"),
    "a shard missing": (lambda f: (f / "__0_0.distcp").unlink(), "its shard __0_0.distcp is missing"),
    "its index cut short": (lambda f: cut(f / ".metadata"), r"its index .metadata cannot be read \(.*\)"),
    "meta.pt missing": (lambda f: (f / "meta.pt").unlink(), r"meta.pt is missing \(rank 0's part: .*\)"),
    "meta.pt cut short": (lambda f: cut(f / "meta.pt"), "meta.pt is cut short or not torch.save's"),
}


def test_a_damaged_sharded_checkpoint_is_refused_before_training_in_one_line_saying_what_is_wrong(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each was a traceback from inside fit (a shard cut short passed the check of the index's shapes), torch's
    "CheckpointException ranks:dict_keys([0])", or "no checkpoint" and "not a torch.save file" for one folder."""
    whole = tmp_path / "whole"
    train(toy.TASK, [*TOY, "--max-steps=2", *SHARDED, f"--output-dir={whole}"])
    unclean = []
    for case, (damaged_by, said) in DAMAGES.items():
        for resume in ("last", "auto"):
            out = tmp_path / f"{case}-{resume}".replace(" ", "-")
            shutil.copytree(whole, out, symlinks=True)
            last = out / "checkpoints" / "last.ckpt"
            damaged_by(last.resolve())
            capsys.readouterr()
            with pytest.raises(SystemExit) as exit_info:
                train(toy.TASK, [*TOY, "--max-steps=4", *SHARDED, f"--output-dir={out}", f"--resume={resume}"])
            printed = capsys.readouterr()
            line = rf"error: --resume: {re.escape(str(last))} is a damaged sharded checkpoint: {said}; give another .*"
            one_line = re.fullmatch(line, printed.err.strip())
            if not (exit_info.value.code == 2 and one_line and "epoch" not in printed.out):
                unclean.append(f"{case}, --resume {resume}: exit {exit_info.value.code}: {printed.err.strip()[-300:]}")
    assert not unclean, "\n".join(unclean)
