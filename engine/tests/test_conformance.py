"""The conformance suite holds the guide's own task to every promise, and each promise it checks can be broken: a toy
task derived from the guide's breaks one, and fails that check with the promise named."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from lightning_gpu_engine import TaskConformance

from .conftest import guide, guide_task, python_block

BROKEN = Path(__file__).parent / "broken_tasks"


def guide_suite() -> type[TaskConformance]:
    """The guide's three lines that add the suite for my_task.py, as a team copies them."""
    namespace: dict[str, Any] = {}
    exec(python_block(guide("prove-your-task")), namespace)
    return namespace["TestMyTask"]


def team_folder(folder: Path, *extra: Path) -> Path:
    """my_task.py from the guide, as a team saves it, with the given scripts beside it (they import it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my_task.py").write_text(guide_task())
    for script in extra:
        shutil.copy(script, folder / script.name)
    return folder


class TestTheGuidesTask(guide_suite()):  # type: ignore[misc]  # the guide's three lines, on the guide's task
    @pytest.fixture(scope="class")
    def task_script(self, tmp_path_factory: pytest.TempPathFactory) -> Path:
        return team_folder(tmp_path_factory.mktemp("team")) / self.script


# 64 samples in batches of 16: an epoch of 4 steps, validated, and 2 more; a SIGTERM at the first lands mid-epoch
TINY, BAD = TestTheGuidesTask.tiny, TestTheGuidesTask.bad


def test_the_guide_says_how_to_run_the_suite() -> None:
    assert "pytest tests/test_my_task_conformance.py" in guide("prove-your-task")


# Each toy in broken_tasks/ breaks one promise: the check that must fail on it, and how its message begins
BROKEN_PROMISES = {
    "plain_loader.py": (
        "test_sigterm_then_resume_last_ends_bit_identical",
        r"resume: weight net\.\S+ differs after SIGTERM \+ --resume last: the task's loader does not resume mid-epoch "
        r"\(use engine train_loader\)",
    ),
    "prog_bar_loss.py": (
        "test_no_metric_is_synced_to_the_progress_bar_every_step",
        r"progress-bar sync: train/loss is logged with prog_bar=True on every step",
    ),
    "defeated_channels_last.py": (
        "test_a_declared_channels_last_holds_in_training",
        r"channels_last: the task declares it, but the input reaching net\.1 \(Conv2d\) in the first training step "
        r"is NCHW",
    ),
    "uncaptured.py": (
        "test_compile_captures_the_networks_and_does_not_recompile_after_the_first_step",
        r"compile: --compile: dynamo captured no graph of net in the first training step, so nothing runs compiled",
    ),
    "recompiling.py": (
        "test_compile_captures_the_networks_and_does_not_recompile_after_the_first_step",
        r"compile: the network was compiled again in training step 2, after the first \(.*\.by == 1",
    ),
    "plain_tensor_state.py": (
        "test_sigkill_after_a_periodic_checkpoint_then_resume_last_ends_bit_identical",
        r"resume: the module's tensor \['target_mean'\] differs on rank 0 after SIGKILL after the periodic "
        r"checkpoint of step 2 \+ --resume last: something random or stateful outside the checkpoint",
    ),
    "unsaved_count.py": (
        "test_sigterm_at_an_epochs_last_batch_and_the_next_ones_first_then_resume_ends_bit_identical",
        r"resume: train/batches_trained logged 1\.0 at the logger's step 4, not 5\.0 at the logger's step 4, after "
        r"SIGTERM at step 4 \(the first epoch's last batch\) and SIGTERM at step 5 \(the second epoch's first\), each "
        r"\+ --resume last",
    ),
}


# A parametrized check, called here in its default file format, on one rank
ARGUMENTS = {
    "test_sigterm_then_resume_last_ends_bit_identical": {"saving": (), "ranks": 1},
    "test_sigkill_after_a_periodic_checkpoint_then_resume_last_ends_bit_identical": {"ranks": 1},
    "test_sigterm_at_an_epochs_last_batch_and_the_next_ones_first_then_resume_ends_bit_identical": {"ranks": 1},
}


@pytest.mark.parametrize("broken", sorted(BROKEN_PROMISES))
def test_a_task_that_breaks_a_promise_fails_the_check_of_that_promise(broken: str, tmp_path: Path) -> None:
    check, message = BROKEN_PROMISES[broken]
    folder = team_folder(tmp_path / "team", BROKEN / broken)

    class Broken(TaskConformance):
        __test__ = False  # run here, one check
        script, tiny, bad = broken, TINY, BAD

    runs = Broken.runs_in(tmp_path / "runs", folder / broken)
    with pytest.raises(AssertionError, match=f"^{message}"):
        getattr(Broken(), check)(runs=runs, **ARGUMENTS.get(check, {}))


def test_every_broken_task_is_checked() -> None:
    assert sorted(p.name for p in BROKEN.glob("*.py")) == sorted(BROKEN_PROMISES)
