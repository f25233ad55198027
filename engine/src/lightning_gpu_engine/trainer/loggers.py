"""The experiment trackers, every one selectable by --logger: a resumed run logs on in the run it continues, keeping
what that run logged before its checkpoint (CSV and TensorBoard drop what it logged after, which is logged again).
The optional trackers' packages are imported only when chosen."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.tools.files import write_text


def build_logger(
    cfg: Config, version: Any = None, resumed_step: int | None = None, project: str = "lightning-gpu-engine"
) -> Logger:
    """`version`: the logger run a resumed checkpoint wrote to, continued where the logger allows it; `resumed_step`:
    the checkpoint's global step, from which the resumed run logs again; `project`: the W&B project and MLflow
    experiment (the task's `Task.tracker_project`)."""
    save_dir = str(Path(cfg.output_dir) / "logs")
    if cfg.logger == "csv":
        return ContinuedCSVLogger(save_dir, version, resumed_step if version is not None else None)
    if cfg.logger == "wandb":  # the trackers' packages are optional: run.main checked this one is installed
        from lightning.pytorch.loggers import WandbLogger

        return WandbLogger(save_dir=save_dir, project=project, version=version)
    if cfg.logger == "mlflow":
        # A tracking server where MLFLOW_TRACKING_URI names one; else a SQLite store in the run (MLflow 3 refuses to
        # start new work in its older ./mlruns folder store)
        store = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(save_dir).resolve() / 'mlflow.db'}"
        artifacts = (Path(save_dir) / "mlartifacts").resolve().as_uri()
        return ContinuedMLFlowLogger(project, tracking_uri=store, run_id=version, artifact_location=artifacts)
    # purge_step: TensorBoard hides what the stopped run logged from the resumed step on, which the resumed run logs
    # again, and keeps everything before it
    purge: dict[str, Any] = {"purge_step": resumed_step} if version is not None and resumed_step is not None else {}
    # no hp_metric: a -1 placeholder at step 0, logged again by every resumed run
    return TensorBoardLogger(save_dir, name="", version=version, default_hp_metric=False, **purge)


class ContinuedCSVLogger(CSVLogger):
    """Lightning's CSVLogger deletes the metrics.csv of the version it continues; this one keeps its rows logged before
    `resumed_step` (those after it are logged again by the resumed run, so each step has its row once)."""

    def __init__(self, save_dir: str, version: Any, resumed_step: int | None) -> None:
        super().__init__(save_dir, name="", version=version)
        self.resumed_step = resumed_step

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None and self.resumed_step is not None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = ContinuedWriter(self.log_dir, self.resumed_step)
        return super().experiment


class ContinuedWriter(ExperimentWriter):
    def __init__(self, log_dir: str, resumed_step: int) -> None:
        self.resumed_step = resumed_step
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        """Instead of deleting metrics.csv, with a warning: keep the rows before the resumed step, and their columns."""
        path = Path(self.metrics_file_path)
        if not path.is_file():
            return
        with path.open(newline="") as file:
            reader = csv.DictReader(file)
            self.metrics_keys = list(reader.fieldnames or [])
            kept = [row for row in reader if row.get("step", "").isdigit() and int(row["step"]) < self.resumed_step]
        text = io.StringIO()  # the csv module's own line ends, as Lightning's appends write them
        writer = csv.DictWriter(text, fieldnames=self.metrics_keys)
        writer.writeheader()
        writer.writerows(kept)
        write_text(path, text.getvalue())


class ContinuedMLFlowLogger(MLFlowLogger):
    """MLflow refuses a param logged again with another value, so a resumed run whose options changed where a resume
    allows it (a new batch split; run.py prints each change) crashed at its start. The run keeps the params it was
    started with."""

    @rank_zero_only  # the other ranks' experiment is a stand-in that holds no run
    def log_hyperparams(self, params: dict[str, Any] | Any) -> None:
        held = self.experiment.get_run(self.run_id).data.params if self.run_id else {}
        super().log_hyperparams({k: v for k, v in dict(params).items() if k not in held})
