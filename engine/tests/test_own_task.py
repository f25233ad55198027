"""A team's own task, as the guide's "Bring your own task" gives it, keeps the engine's features: run the way a user
runs it, from the command line, with the guide's own text as the program."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from .conftest import TOY, guide, run_toy

SMALL = [*TOY, "--batch-size=32", "--samples=512", "--log-every-n-steps=4"]


def test_the_guide_names_the_command_that_trains_it() -> None:
    assert "python my_task.py" in guide("bring-your-own-task")


def test_its_options_are_flags_with_their_reasons_and_a_bad_value_is_one_line(my_task: Path, tmp_path: Path) -> None:
    shown = run_toy(my_task, "--help")
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"--hidden HIDDEN\s+width of the two hidden layers \(default: 64\)", shown.stdout)
    assert "--precision" in shown.stdout, "the engine's options stand beside the task's"
    refused = run_toy(my_task, "--hidden=0", f"--output-dir={tmp_path / 'never'}")
    assert refused.returncode == 2
    assert refused.stderr.strip() == "error: --hidden: must be a positive integer, got 0"
    assert not (tmp_path / "never").exists(), "nothing is written for a refused run"


def test_a_run_resolves_the_hardware_logs_throughput_and_keeps_the_lowest_val_loss(
    my_task: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    done = run_toy(my_task, *SMALL, "--max-epochs=3", f"--output-dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("hardware: cpu x1 | precision=32-true compile=False")
    with open(out / "logs" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert any(float(r["train/device/samples_per_sec"] or 0) > 0 for r in rows), "the throughput monitor logged"
    val = [float(r["val/loss"]) for r in rows if r["val/loss"]]
    assert len(val) == 3
    (best,) = (out / "checkpoints").glob("best-*.ckpt")
    assert best.name == f"best-epoch{val.index(min(val)):03d}-loss{min(val):.4f}.ckpt"
    assert re.search(rf"best val/loss={min(val):.4f}  test/loss=\d\.\d+  train throughput=\d+ samples/s", done.stdout)


@pytest.mark.multiprocess
def test_two_devices_run_ddp(my_task: Path, tmp_path: Path) -> None:
    done = run_toy(my_task, *SMALL, "--devices=2", "--max-epochs=1", f"--output-dir={tmp_path / 'ddp'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("hardware: cpu x2 |")
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in done.stdout + done.stderr


@pytest.mark.multiprocess
def test_two_ranks_test_an_odd_split_as_one_device_does(my_task: Path, tmp_path: Path) -> None:
    """9 test samples on 2 ranks: Lightning's padded split counted one twice, and its mean over ranks rounded the
    sample count 4.5 down to 4, so the same checkpoint tested on 2 ranks gave another test/loss than on one device."""
    one = tmp_path / "one"
    done = run_toy(my_task, *TOY, "--samples=36", "--max-epochs=1", f"--output-dir={one}")
    assert done.returncode == 0, done.stderr[-3000:]
    two = tmp_path / "two"
    shutil.copytree(one, two)  # the same checkpoint, tested again on 2 ranks
    # 4 per device keeps the global batch; each rank then holds 5 or 4 samples, in 2 batches each
    done = run_toy(
        my_task,
        *TOY,
        "--samples=36",
        "--max-epochs=1",
        f"--output-dir={two}",
        "--resume=last",
        "--devices=2",
        "--batch-size=4",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("hardware: cpu x2 |") and "DistributedSampler" not in done.stderr
    # the copied run tests its own best checkpoint, and still knows its score
    assert f"checkpoint path at {two / 'checkpoints' / 'best-epoch000'}" in done.stdout + done.stderr
    assert re.search(r"^best val/loss=\d\.\d{4}  test/loss=", done.stdout, re.M), done.stdout[-2000:]
    tested = []
    for run in (one, two):
        with open(run / "logs" / "version_0" / "metrics.csv") as f:
            tested += [float(r["test/loss"]) for r in csv.DictReader(f) if r.get("test/loss")]
    assert len(tested) == 2 and tested[1] == pytest.approx(tested[0], rel=1e-6), tested


def test_a_task_whose_options_shadow_the_engines_is_refused_when_it_is_written() -> None:
    from dataclasses import dataclass

    from lightning_gpu_engine import Task, opt

    @dataclass
    class Shadowing:
        lr: float = opt(0.1, "a second --lr would silently win over the engine's")

    def never(*args: Any) -> Any:
        raise AssertionError("a refused task is never built")

    with pytest.raises(TypeError, match=r"options \['lr'\] are the engine's own"):
        Task("shadowing", Shadowing, build_data=never, build_model=never)
    with pytest.raises(TypeError, match="mode must be 'min' or 'max'"):
        Task("backwards", dataclass(type("Empty", (), {})), build_data=never, build_model=never, mode="largest")
