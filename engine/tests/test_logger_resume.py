"""A resumed run logs on in the logger run it continues, keeping every row logged before the stop: stopped (SIGTERM to
its process group, or kill -9) and resumed, a CSV-, TensorBoard- or MLflow-logged run shows each step's values once,
the uninterrupted run's exactly; a W&B run resumed offline continues its run id and keeps its first part. A routine
resume prints none of Lightning's "directory exists and is not empty" warnings."""

from __future__ import annotations

import csv
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from .conftest import TOY, run_toy, signalling_task

# 512 samples in batches of 8: 64 steps an epoch, two epochs, a row per step and a validation row per epoch
ARGS = [*TOY, "--samples=512", "--max-epochs=2"]
# The throughput monitor's columns: wall-clock rates, and counts of what this process has trained
PER_PROCESS = ("per_sec", "time", "train/batches", "train/samples")


def rows(output_dir: Path, logger: str) -> list[Any]:
    """CSV: metrics.csv's rows; TensorBoard: (tag, step, value) of every scalar as TensorBoard shows it, which reads
    every event file of the version and hides what a purge step (the resumed run's start) says was logged again."""
    version = output_dir / "logs" / "version_0"
    if logger == "mlflow":  # its SQLite store, one run: every value of every metric, as MLflow's history keeps it
        with sqlite3.connect(output_dir / "logs" / "mlflow.db") as db:
            found = db.execute("SELECT key, step, value FROM metrics ORDER BY key, timestamp, step").fetchall()
        return [row for row in found if not any(p in row[0] for p in PER_PROCESS)]
    if logger == "tensorboard":
        events = EventAccumulator(str(version), size_guidance={"scalars": 0})
        events.Reload()
        tags = sorted(t for t in events.Tags()["scalars"] if not any(p in t for p in PER_PROCESS))
        return [(tag, e.step, e.value) for tag in tags for e in events.Scalars(tag)]
    with open(version / "metrics.csv", newline="") as file:
        return [{k: v for k, v in row.items() if not any(t in k for t in PER_PROCESS)} for row in csv.DictReader(file)]


@pytest.mark.parametrize(
    ("logger", "stop"),
    [
        ("csv", signal.SIGTERM),  # saved at the stop: the resumed run starts where the logs end
        # killed some steps after a save (every 20 steps, and at the epoch's end): the resumed run logs them again
        ("tensorboard", signal.SIGKILL),
        ("mlflow", signal.SIGTERM),  # its local store; a tracking server keeps the same history
    ],
)
def test_a_run_stopped_and_resumed_logs_every_step_once(
    my_task: Path, tmp_path: Path, logger: str, stop: signal.Signals
) -> None:
    if logger == "mlflow":
        pytest.importorskip("mlflow", reason="--logger mlflow's package is not installed here")
    args = [*ARGS, f"--logger={logger}", "--checkpoint-every=20steps"]
    whole = run_toy(my_task, *args, f"--output-dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "stopped"
    # at step 90: in the second epoch, 10 steps after the save of step 80 (a kill -9 loses those, and logs them again)
    script = signalling_task(
        tmp_path / "stops.py", my_task, "on_train_batch_end(self, trainer, *args)", "trainer.global_step == 90", stop
    )
    stopped = run_toy(script, *args, f"--output-dir={out}", new_session=True)
    assert stopped.returncode == (128 + stop if stop == signal.SIGTERM else -stop), stopped.stderr[-3000:]
    before = rows(out, logger)
    assert 0 < len(before) < len(rows(tmp_path / "whole", logger)), "the stopped run had logged part of the rows"
    resumed = run_toy(my_task, *args, f"--output-dir={out}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "exists and is not empty" not in resumed.stdout + resumed.stderr
    got, want = rows(out, logger), rows(tmp_path / "whole", logger)
    if logger == "tensorboard":
        files = [len(list((o / "logs" / "version_0").glob("events.out.tfevents.*"))) for o in (out, tmp_path / "whole")]
        assert files[0] > files[1], "the stopped run's event files are kept beside the resumed run's"
    elif logger == "csv":
        assert [r["step"] for r in got] == [r["step"] for r in want], "each step's rows once, in order"
    assert got == want


def test_a_wandb_run_resumed_offline_continues_its_run_and_keeps_what_it_logged(my_task: Path, tmp_path: Path) -> None:
    """Offline, as on a cluster without internet: the resumed run writes the same run id beside the first part, which
    it leaves as it was; `wandb sync` uploads both into one run."""
    pytest.importorskip("wandb", reason="--logger wandb's package is not installed here")
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    out = tmp_path / "run"
    args = [*TOY, "--logger=wandb", f"--output-dir={out}"]
    first = run_toy(my_task, *args, "--max-epochs=1", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    (part,) = (out / "logs" / "wandb").glob("offline-run-*")
    logged = {path: path.read_bytes() for path in part.glob("*.wandb")}
    assert logged and all(logged.values()), "the first part logged to its run file"
    resumed = run_toy(my_task, *args, "--max-epochs=2", "--resume=last", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    parts = sorted((out / "logs" / "wandb").glob("offline-run-*"))
    assert len(parts) == 2 and len({p.name.rsplit("-", 1)[1] for p in parts}) == 1, parts  # one run id
    assert {path: path.read_bytes() for path in logged} == logged, "the first part is kept as it was"
