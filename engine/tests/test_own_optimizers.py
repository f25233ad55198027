"""A module that builds its own optimizers, and the engine options meant for EngineModule's: a OneCycleLR is not
stretched past its end on --resume, an ignored option is not recorded as used, and one given on a fresh run is said
to be ignored. Also another task's checkpoint given to --resume. Each through `train`, as the task's script runs it."""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import yaml

from lightning_gpu_engine import Task, run_hparams, train

from .conftest import TOY
from .team_tasks import sequence

# TOY: 32 samples in batches of 8, 4 optimizer steps an epoch
LSTM = [flag for flag in TOY if not flag.startswith(("--samples", "--batch-size"))]
LSTM += ["--batch-size=16", "--samples=256", "--window=6", "--hidden=4"]  # 16 steps an epoch
OWN = "Forecaster builds its own optimizers"


def one_cycle_task(toy: ModuleType, interval: str, stop_at: int | None = None) -> Task:
    """The guide's regressor with SGD and the OneCycleLR Lightning's docs build (total_steps: the run's steps), or
    one stepped per epoch over the run's epochs; Ctrl-C before step `stop_at`."""

    class OneCycle(toy.Regressor):  # type: ignore[misc, name-defined]
        def configure_optimizers(self) -> Any:
            sgd = torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])
            steps = self.trainer.estimated_stepping_batches if interval == "step" else self.trainer.max_epochs
            cycle = torch.optim.lr_scheduler.OneCycleLR(sgd, max_lr=self.hparams["lr"], total_steps=int(steps))
            return {"optimizer": sgd, "lr_scheduler": {"scheduler": cycle, "interval": interval}}

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            if self.global_step == stop_at:
                os.kill(os.getpid(), signal.SIGINT)

    def build(cfg: Any, opts: Any, hw: Any, data: Any) -> OneCycle:
        return OneCycle(opts.features, opts.hidden, **run_hparams(cfg, hw))

    return dataclasses.replace(toy.TASK, build_model=build)


def last(out: Path) -> dict[str, Any]:
    return torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def files(folder: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(task: Task, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line `train` answers `argv` with, exit code 2."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        train(task, argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and err.count("\n") == 1 and "Traceback" not in out + err, out + err
    return err.strip()


def said(capsys: pytest.CaptureFixture[str], prefix: str) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize(("interval", "built", "asked"), [("step", 8, 12), ("epoch", 2, 3)])
def test_a_resume_longer_than_a_modules_own_one_cycle_schedule_is_refused_before_anything_is_written(
    interval: str, built: int, asked: int, toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Restored as saved, the OneCycleLR raised "Tried to step 9 times" as a traceback once the first run's 8 steps
    were done, after a line had said that the module's schedulers go on."""
    task, out = one_cycle_task(toy, interval), tmp_path / "run"
    train(task, [*TOY, "--max-epochs=2", f"--output-dir={out}"])
    assert last(out)["lr_schedulers"][0]["total_steps"] == built
    before = files(out)
    line = refused(task, [*TOY, "--max-epochs=3", f"--output-dir={out}", "--resume=last"], capsys)
    assert line == (
        f"error: --max-epochs: OneCycle's own OneCycleLR was built for {built} steps, and --max-epochs 3 asks it for "
        f"{asked}; restored as saved, it cannot step past its end: resume with --max-epochs 2, or start afresh in "
        "another --output-dir (where it is built for the whole run)"
    )
    assert files(out) == before, "no config.yaml, log, lock or checkpoint written"


def test_a_resume_within_a_modules_own_one_cycle_schedule_goes_on_to_its_new_length(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        train(one_cycle_task(toy, "step", stop_at=2), [*TOY, "--max-epochs=2", f"--output-dir={out}"])
    assert stop.value.code == 128 + signal.SIGINT
    # saved after the step under way
    assert (last(out)["global_step"], last(out)["lr_schedulers"][0]["total_steps"]) == (3, 8)
    capsys.readouterr()
    resumed = [*TOY, "--max-epochs=2", "--max-steps=6", f"--output-dir={out}", "--resume=last"]
    train(one_cycle_task(toy, "step"), resumed)
    assert said(capsys, "resume: ") == [
        "resume: --max-steps 6 instead of the checkpoint's -1: the run goes on to it; the module's own schedulers go "
        "on from their saved state"
    ]
    schedule = last(out)["lr_schedulers"][0]
    assert (last(out)["global_step"], schedule["last_epoch"], schedule["total_steps"]) == (6, 6, 8)


def test_an_ignored_option_on_resume_is_recorded_with_the_checkpoints_value_not_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The forecaster's Task here does not declare the optimizer options not applicable, so they can be given. Its
    Adam comes back as saved: config.yaml, hparams.yaml and the new checkpoint record the rate it uses, and the next
    resume, given none of them, has nothing to say of them."""
    task, out = dataclasses.replace(sequence.TASK, not_applicable={}), tmp_path / "run"
    train(task, [*LSTM, "--max-steps=20", f"--output-dir={out}"])
    ignored = ["--lr=0.5", "--weight-decay=0.3", "--betas=0.8,0.9"]
    capsys.readouterr()
    train(task, [*LSTM, "--max-steps=24", f"--output-dir={out}", "--resume=last", *ignored])
    assert [line.split(" (")[0] for line in said(capsys, "resume: ")] == [
        "resume: --lr 0.5 is ignored",
        "resume: --weight-decay 0.3 is ignored",
        "resume: --betas 0.8,0.9 is ignored",
        "resume: --max-steps 24 instead of the checkpoint's 20: the run goes on to it; the module's own schedulers go "
        "on from their saved state",
    ]
    used = {"lr": 0.01, "weight_decay": 0.05}
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert {**{k: config[k] for k in used}, "betas": config["betas"]} == {**used, "betas": "0.9,0.999"}
    assert config["max_steps"] == 24, "the length is the run's, and used"
    logged = yaml.safe_load((out / "logs" / "version_0" / "hparams.yaml").read_text())
    saved = last(out)
    for hparams in (logged, saved["hyper_parameters"]):
        assert {k: hparams[k] for k in (*used, "betas")} == {**used, "betas": [0.9, 0.999]}, hparams
    assert {k: saved["run_record"][k] for k in (*used, "betas")} == {**used, "betas": "0.9,0.999"}
    assert saved["optimizer_states"][0]["param_groups"][0]["lr"] < 0.01, "the StepLR's rate, decayed from 0.01"
    train(task, [*LSTM, "--max-steps=28", f"--output-dir={out}", "--resume=last"])
    assert [line for line in said(capsys, "resume: ") if "ignored" in line] == [], "nothing was changed"


def test_engine_options_a_modules_own_optimizers_neither_read_nor_hold_are_said_to_be_ignored_on_a_fresh_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The forecaster's Adam takes its rate from the hparams, and no weight decay, betas or warm-up of the engine's."""
    task = dataclasses.replace(sequence.TASK, not_applicable={})
    given = ["--lr=0.02", "--weight-decay=0.3", "--betas=0.5,0.9", "--warmup-fraction=0.1"]
    capsys.readouterr()
    train(task, [*LSTM, "--max-steps=2", f"--output-dir={tmp_path / 'given'}", *given])
    assert said(capsys, "warning: ") == [
        f"warning: --weight-decay 0.3, --betas 0.5,0.9 and --warmup-fraction 0.1 are ignored: {OWN}, which neither "
        "read nor hold them; leave them out, or declare them in Task(not_applicable=...)"
    ]
    train(task, [*LSTM, "--max-steps=2", f"--output-dir={tmp_path / 'read'}", "--lr=0.02"])
    assert said(capsys, "warning: ") == [], "the rate it reads, and the defaults it was not given, are not named"

    class WarmedUp(sequence.Forecaster):
        def configure_optimizers(self) -> Any:
            adam = torch.optim.Adam(self.parameters(), lr=self.hparams["lr"])
            return [adam], [torch.optim.lr_scheduler.LinearLR(adam, start_factor=self.hparams.warmup_fraction)]

    def build(cfg: Any, opts: Any, hw: Any, data: Any) -> WarmedUp:
        return WarmedUp(opts.window, opts.hidden, **run_hparams(cfg, hw))

    warmed_up = dataclasses.replace(task, build_model=build)
    train(warmed_up, [*LSTM, "--max-steps=2", f"--output-dir={tmp_path / 'warm'}", *given[2:]])
    assert said(capsys, "warning: ") == [
        f"warning: --betas 0.5,0.9 is ignored: {OWN.replace('Forecaster', 'WarmedUp')}, which neither read nor hold "
        "it; leave it out, or declare it in Task(not_applicable=...)"
    ], "the warm-up it reads as an attribute of its hparams is not named"


def test_another_tasks_checkpoint_given_to_resume_is_refused_as_another_tasks(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The forecaster's checkpoint, given to the regressor: each task's own options were compared as if changed, and
    the advice to resume with the forecaster's --hidden led to another refusal."""
    train(sequence.TASK, [*LSTM, "--max-steps=2", f"--output-dir={tmp_path / 'lstm'}"])
    given = f"--resume={tmp_path / 'lstm' / 'checkpoints' / 'last.ckpt'}"
    line = refused(toy.TASK, [*TOY, "--max-epochs=1", f"--output-dir={tmp_path / 'run'}", given], capsys)
    assert line == (
        "error: --resume: the checkpoint is not a checkpoint of a tabular regressor (another task's?): it was "
        "trained with --window, options this task has not; give one of its own, or start afresh in another "
        "--output-dir"
    )
    assert not (tmp_path / "run").exists()
