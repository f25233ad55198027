"""`--val-every` and `--val-batches`: validation on a budget of optimizer steps, each one bounded in batches, seen by
the best checkpoint, validation.jsonl, the sweep's pruner and the summary line, and continued exactly on resume."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import optuna
import pytest
import torch

from lightning_gpu_engine import train

from .conftest import TOY, run_engine, run_toy, signalling_task

# 192 samples in batches of 8: 24 steps an epoch, so the run ends inside its first. Validation: 48 samples, 6 batches.
BUDGET = ["--samples=192", "--max-steps=12", "--val-every=4", "--val-batches=2"]


def records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "validation.jsonl").read_text().splitlines()]


def checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def best_score(output: str) -> str:
    """The summary line's best validation and test scores."""
    [scores] = re.findall(r"^best (val/loss=\S+\s+test/loss=\S+)", output, re.MULTILINE)
    return scores


def count_validation_batches(monkeypatch: pytest.MonkeyPatch, toy: ModuleType) -> Counter[int]:
    """The validation batches run (sanity check aside), by the optimizer step after which they ran."""
    seen: Counter[int] = Counter()
    validation_step = toy.Regressor.validation_step

    def counted(self: Any, batch: Any, batch_idx: int) -> None:
        if not self.trainer.sanity_checking:
            seen[self.global_step] += 1
        validation_step(self, batch, batch_idx)

    monkeypatch.setattr(toy.Regressor, "validation_step", counted)
    return seen


def test_a_budgeted_run_validates_every_n_steps_on_n_batches_and_its_summary_reports_the_best(
    toy: ModuleType,
    tiny_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    batches = count_validation_batches(monkeypatch, toy)
    train(toy.TASK, [*tiny_args, *BUDGET])
    assert batches == {4: 2, 8: 2, 12: 2}, "after steps 4, 8 and 12, 2 of the 6 validation batches each"
    run = tmp_path / "run"
    validated = records(run)
    assert [(r["validation"], r["epoch"], r["step"]) for r in validated] == [(1, 0, 4), (2, 0, 8), (3, 0, 12)]
    best = min(validated, key=lambda r: r["val/loss"])
    summary = capsys.readouterr().out.splitlines()[-1]
    shown = float(re.match(r"best val/loss=(\S+) ", summary).group(1))  # type: ignore[union-attr]
    assert math.isfinite(shown) and shown == round(best["val/loss"], 4), summary
    [kept] = (run / "checkpoints").glob("best-*.ckpt")
    assert checkpoint(kept)["global_step"] == best["step"]
    assert checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 12


def test_with_accumulation_and_epochs_shorter_than_the_budget_optimizer_steps_are_counted(
    toy: ModuleType, tiny_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 batches an epoch, 3 per step: steps of 3, 3, 3 and 1 batches, so 4 steps an epoch. Counted in batches (18
    for 6 steps), validation would fall between accumulated batches of the second epoch, and once only."""
    batches = count_validation_batches(monkeypatch, toy)
    train(toy.TASK, [*tiny_args, "--samples=80", "--max-epochs=3", "--accumulate-grad-batches=3", "--val-every=6"])
    assert batches == {6: 3, 12: 3}, "after steps 6 and 12, all 3 validation batches"
    assert [(r["epoch"], r["step"]) for r in records(tmp_path / "run")] == [(1, 6), (2, 12)]


def test_a_run_that_ends_before_its_first_validation_says_so_and_saves_its_steps(
    toy: ModuleType, tiny_args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train(toy.TASK, [*tiny_args, "--samples=192", "--max-steps=3", "--val-every=4"])
    summary = capsys.readouterr().out.splitlines()[-1]
    assert summary.startswith(
        "no validation ran (training ended at step 3, before the first --val-every step, 4): no best checkpoint"
    )
    # Lightning saves a ModelCheckpoint without a monitor after each validation once they come by steps: the last
    # steps of a run would be lost
    assert checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")["global_step"] == 3


@pytest.fixture(scope="module")
def straight(my_task: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The budgeted run, uninterrupted: its folder and output."""
    run = tmp_path_factory.mktemp("straight") / "run"
    done = run_toy(my_task, *TOY, *BUDGET, f"--output-dir={run}")
    assert done.returncode == 0, done.stderr[-3000:]
    return run, done.stdout


@pytest.mark.parametrize(("signalled_after", "saved_at"), [(6, 7), (7, 8)])
def test_sigterm_between_or_at_validations_then_resume_last_ends_as_the_uninterrupted_run(
    my_task: Path, straight: tuple[Path, str], tmp_path: Path, signalled_after: int, saved_at: int
) -> None:
    """Saved after step 7, between the validations after steps 4 and 8; or after step 8 and its validation, which
    the resumed run must neither lose nor run again."""
    # SIGTERM at the end of step `signalled_after`: the stop is agreed on at the next step's end, and taken after any
    # validation due there
    hook = "on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx)"
    script = signalling_task(tmp_path / "signals_itself.py", my_task, hook, f"trainer.global_step == {signalled_after}")
    run = tmp_path / "run"
    stopped = run_toy(script, *TOY, *BUDGET, f"--output-dir={run}", new_session=True)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    last = run / "checkpoints" / "last.ckpt"
    assert checkpoint(last)["global_step"] == saved_at
    assert [r["step"] for r in records(run)] == list(range(4, saved_at + 1, 4))

    resumed = run_toy(my_task, *TOY, *BUDGET, f"--output-dir={run}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    whole, output = straight
    expected, got = checkpoint(whole / "checkpoints" / "last.ckpt"), checkpoint(last)
    assert got["global_step"] == expected["global_step"] == 12
    for name, weight in expected["state_dict"].items():
        assert torch.equal(got["state_dict"][name], weight), name
    assert records(run) == records(whole), "the same validations, each once"
    assert best_score(resumed.stdout) == best_score(output)


def test_a_periodic_save_due_at_a_validation_step_waits_for_it(
    toy: ModuleType,
    tiny_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A crash after step 9 leaves the periodic save of step 8. Saved before that step's validation, the resumed run
    took the validation as done and never knew its score: here the best, which the summary then missed."""
    args = [*tiny_args, "--samples=192", "--max-steps=10", "--val-every=4", "--checkpoint-every=4steps", "--lr=0.01"]
    train(toy.TASK, [*args, f"--output-dir={tmp_path / 'whole'}"])
    whole = records(tmp_path / "whole")
    assert [r["step"] for r in whole] == [4, 8] and whole[1]["val/loss"] < whole[0]["val/loss"], "step 8 is the best"
    expected = best_score(capsys.readouterr().out)

    def crash_after_step_9(self: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step == 9:
            raise RuntimeError("crash")

    with monkeypatch.context() as patch:
        patch.setattr(toy.Regressor, "on_train_batch_end", crash_after_step_9, raising=False)
        with pytest.raises(RuntimeError, match="crash"):
            train(toy.TASK, args)
    assert checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")["global_step"] == 8
    capsys.readouterr()
    train(toy.TASK, [*args, "--resume=last"])
    assert best_score(capsys.readouterr().out) == expected


def test_the_sweeps_pruner_is_told_every_validation(my_task: Path, tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text("lr: {low: 1.0e-3, high: 1.0e-2, log: true}\n")
    flags = ["--task", str(my_task), "--space", str(tmp_path / "space.yaml"), "--trials=1", "--pruner=median"]
    done = run_engine("sweep", *flags, f"--output-dir={tmp_path / 'sweep'}", *TOY, *BUDGET, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    [trial] = optuna.load_study(study_name="sweep", storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}").trials
    validated = records(tmp_path / "sweep" / "trial-0000")
    assert trial.intermediate_values == {r["validation"]: r["val/loss"] for r in validated}
    assert len(trial.intermediate_values) == 3 and trial.value == min(r["val/loss"] for r in validated)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--val-every", "0"], "error: --val-every: must be a positive integer, got 0"),
        (["--val-every", "-4"], "error: --val-every: must be a positive integer, got -4"),
        (["--val-every", "1.5"], "error: argument --val-every: expected an integer, got '1.5'"),
        (["--val-batches", "0"], "error: --val-batches: must be a positive integer, got 0"),
        (["--val-batches", "all"], "error: argument --val-batches: expected an integer, got 'all'"),
    ],
)
def test_bad_values_are_one_line_naming_the_flag_and_nothing_is_written(
    my_task: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    refused = run_toy(my_task, *TOY, *args, f"--output-dir={tmp_path / 'run'}")
    assert (refused.returncode, refused.stderr.strip()) == (2, expected)
    assert not (tmp_path / "run").exists()
