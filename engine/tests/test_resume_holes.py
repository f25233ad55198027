"""Lightning's open resume holes, closed for every task: each shown through a task's script, stopped mid-epoch and
resumed with `--resume last`, against the run never stopped.

- Lightning #19549: the first validation after a mid-epoch resume ran one batch (its counters came back at the end of
  the validation before the stop); here it covers the whole split.
- Lightning #20550: a module whose `configure_optimizers` reads `trainer.estimated_stepping_batches` (every
  EngineModule does, for its schedule) made Lightning drop the train loader's place in the epoch.
- Lightning #18282: one torchmetrics metric logged from two validation loaders gave the second loader a value over
  both; each loader keeps its own, and a resumed run reports the same.
"""

from __future__ import annotations

import csv
import signal
from pathlib import Path

import pytest
import torch

from lightning_gpu_engine.testing.reference_runs import ReferenceRuns

from .conftest import TOY, assert_ended_alike, run_toy, signalling_task, uninterrupted

# 64 samples in batches of 8: 8 steps an epoch; validation gets 16 samples, two batches
SPLITS = [*TOY, "--samples=64"]
BATCH_START = "on_train_batch_start(self, trainer, pl_module, batch, batch_idx)"

# The guide's regressor validated on two loaders, its validation split and its test split, logging one metric object
# from both under each loader's key, as Lightning's guide to logging does, and the same loss as plain tensors
TWO_LOADERS = """
import dataclasses, importlib.util, sys
from pathlib import Path

import torch.nn.functional as F
from torchmetrics import MeanSquaredError

from lightning_gpu_engine import eval_loader, train

spec = importlib.util.spec_from_file_location("guide_task", Path(__file__).with_name("my_task.py"))
guide = importlib.util.module_from_spec(spec)
sys.modules["guide_task"] = guide
spec.loader.exec_module(guide)


class TwoLoaders(guide.RegressionData):
    def val_dataloader(self):
        hp = self.hparams
        splits = (self.splits["val"], self.splits["test"])
        return [eval_loader(s, hp["batch_size"], hp["num_workers"], hp["pin_memory"]) for s in splits]


class TwoScores(guide.Regressor):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.mse = MeanSquaredError()

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        predicted = self.net(x).squeeze(-1)
        self.mse(predicted, y)
        self.log("val/mse", self.mse)
        self.log("val/mse_of_batches", F.mse_loss(predicted, y))
        if dataloader_idx == 0:
            self.log("val/loss", F.mse_loss(predicted, y), add_dataloader_idx=False)


data, model = guide.TASK.build_data, guide.TASK.build_model
TASK = dataclasses.replace(
    guide.TASK,
    build_data=lambda cfg, opts, hw: TwoLoaders(**data(cfg, opts, hw).hparams),
    build_model=lambda cfg, opts, hw, d: TwoScores(**model(cfg, opts, hw, d).hparams),
)

if __name__ == "__main__":
    train(TASK)
"""


def stopped_and_resumed(program: Path, args: list[str], tmp_path: Path, step: int, saved_at: int) -> Path:
    """`program` stopped by SIGTERM during `step` (or, where the last save was before it, SIGKILL as it began),
    resumed from the save of step `saved_at` to its end: its output folder."""
    out = tmp_path / "stopped"
    signum = signal.SIGTERM if saved_at == step else signal.SIGKILL
    script = signalling_task(tmp_path / "stops.py", program, BATCH_START, f"trainer.global_step == {step - 1}", signum)
    stopped = run_toy(script, *args, f"--output-dir={out}", new_session=True)
    assert stopped.returncode == (143 if signum == signal.SIGTERM else -signum), stopped.stderr[-3000:]
    saved = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["global_step"] == saved_at, f"stopped in step {step}: saved at {saved['global_step']}, not {saved_at}"
    resumed = run_toy(program, *args, f"--output-dir={out}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return out


@pytest.mark.parametrize(
    ("step", "saved_at", "extra"),
    [(5, 5, []), (4, 3, ["--checkpoint-every=3steps"])],  # a save after step 3's validation, which a kill leaves
    ids=["sigterm", "kill"],
)
def test_the_first_validation_after_a_mid_epoch_resume_covers_the_whole_split(
    step: int, saved_at: int, extra: list[str], my_task: Path, references: ReferenceRuns, tmp_path: Path
) -> None:
    """Validations after steps 3, 6 and 9 of 12: the run resumes after the one of step 3, mid-epoch, and the next
    validation's loss, the mean over both of its batches, is the uninterrupted run's."""
    args = [*SPLITS, "--max-steps=12", "--val-every=3", *extra]
    want = uninterrupted(references, my_task, args, tmp_path / "uninterrupted")
    got = stopped_and_resumed(my_task, args, tmp_path, step, saved_at)
    assert_ended_alike(want, got, f"in step {step}, resumed from step {saved_at}")


def test_a_module_reading_estimated_stepping_batches_resumes_at_its_place_in_the_epoch(
    my_task: Path, references: ReferenceRuns, tmp_path: Path
) -> None:
    """The guide's regressor, an EngineModule: its schedule's length is `trainer.estimated_stepping_batches`, which
    Lightning works out by loading the train loader before it restores the loops, and then leaves the loader's saved
    place unused. Stopped at step 3 of 8, the resumed run must read batches 4 to 8 of that epoch's order."""
    args = [*SPLITS, "--max-epochs=2"]
    want = uninterrupted(references, my_task, args, tmp_path / "uninterrupted")
    got = stopped_and_resumed(my_task, args, tmp_path, 3, 3)
    assert_ended_alike(want, got, "during step 3, by a module reading estimated_stepping_batches")


def validation_rows(out: Path) -> list[dict[str, str]]:
    """The val/ columns of each validation's row of metrics.csv, in the order logged."""
    with open(out / "logs" / "version_0" / "metrics.csv", newline="") as file:
        rows = [{k: v for k, v in row.items() if k.startswith("val/") and v} for row in csv.DictReader(file)]
    return [row for row in rows if row]


def test_two_validation_loaders_keep_their_own_values_of_one_metric_and_resume_to_them(
    my_task: Path, references: ReferenceRuns, tmp_path: Path
) -> None:
    program = my_task.with_name("two_loaders.py")
    program.write_text(TWO_LOADERS)
    args = [*SPLITS, "--max-steps=12", "--val-every=3"]
    want = uninterrupted(references, program, args, tmp_path / "uninterrupted")
    rows = validation_rows(want)
    assert len(rows) == 4, rows
    for row in rows:  # the metric object's value is the mean of the loader's own batches, and the loaders differ
        for loader in ("dataloader_idx_0", "dataloader_idx_1"):
            own = float(row[f"val/mse_of_batches/{loader}"])
            assert float(row[f"val/mse/{loader}"]) == pytest.approx(own, rel=1e-6), (loader, row)
        assert row["val/mse/dataloader_idx_0"] != row["val/mse/dataloader_idx_1"]
    got = stopped_and_resumed(program, args, tmp_path, 5, 5)
    assert validation_rows(got) == rows, "the resumed run's validations differ from the uninterrupted run's"
    assert_ended_alike(want, got, "during step 5, with two validation loaders")
