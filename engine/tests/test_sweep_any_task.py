"""`python -m lightning_gpu_engine sweep --task` (a project's `sweep.py --task`) on a team's own task, the guide's
regressor with one option more whose check reads the disk (a `--data-path` that must exist): each trial runs the
team's own file with its values and the fixed flags, and a bad value or task is still refused in one line that blames
the right flag."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import optuna
import pytest
import yaml
from optuna.storages.journal import JournalFileBackend

from lightning_gpu_engine.sweep import main as sweep_main
from lightning_gpu_engine.testing import processes, warm_starts

from .conftest import guide_task

SMALL = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--num-workers=0", "--batch-size=32"]
SMALL += ["--samples=256", "--logger=csv", "--max-epochs=2"]

# The guide's task, extended as a team would: an option checked against the disk. Its default ("data") does not
# exist where the sweep runs, so a check of the space against the defaults refuses every key.
DISK_TASK = """
from dataclasses import dataclass, replace
from pathlib import Path

from my_task import TASK as REGRESSOR, RegressionOptions
from lightning_gpu_engine import ConfigError, opt, train


@dataclass
class DiskOptions(RegressionOptions):
    data_path: str = opt("data", "a folder that must exist")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not Path(self.data_path).is_dir():
            raise ConfigError("data_path", f"{self.data_path} is not a folder")


TASK = replace(REGRESSOR, options=DiskOptions)

if __name__ == "__main__":
    train(TASK)
"""


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A team's folder: the guide's my_task.py, disk_task.py beside it, a data folder elsewhere."""
    folder = tmp_path_factory.mktemp("team")
    (folder / "my_task.py").write_text(guide_task())
    (folder / "disk_task.py").write_text(DISK_TASK)
    (folder / "elsewhere" / "data").mkdir(parents=True)
    (folder / "space.yaml").write_text("hidden: {choices: [4, 16]}\nlr: {low: 1.0e-3, high: 1.0e-2, log: true}\n")
    return folder


def sweep(team: Path, *args: str) -> subprocess.Popen[str]:
    """`python -m lightning_gpu_engine sweep ARGS` from the team's folder, as its members run it."""
    env = processes.script_env(team)
    command = [sys.executable, "-m", "lightning_gpu_engine", "sweep", *args]
    return warm_starts.popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=team, env=env, start_new_session=True
    )


def drawn(storage: str) -> dict[int, float]:
    """Each trial's lr, by trial number."""
    backend = JournalFileBackend(storage.removeprefix("journal:"))
    study = optuna.load_study(study_name="sweep", storage=optuna.storages.JournalStorage(backend))
    return {t.number: t.params["lr"] for t in study.trials}


def test_each_trial_trains_the_teams_file_with_its_values_and_the_fixed_flags(team: Path) -> None:
    data = team / "elsewhere" / "data"
    flags = ["--trials", "2", "--pruner", "none", *SMALL, f"--data-path={data}"]
    process = sweep(team, "--task", "disk_task", "--space", "space.yaml", "--output-dir", "sweep", *flags)
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output[-4000:]
    study = optuna.load_study(study_name="sweep", storage=f"sqlite:///{team / 'sweep' / 'study.db'}")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    for trial in study.trials:  # what the trial's own run saved: its searched values, the fixed flags, the task's
        saved = yaml.safe_load((team / "sweep" / f"trial-{trial.number:04d}" / "config.yaml").read_text())
        assert saved["hidden"] == trial.params["hidden"] and saved["lr"] == pytest.approx(trial.params["lr"])
        assert saved["data_path"] == str(data) and saved["samples"] == 256 and saved["max_epochs"] == 2
        assert trial.user_attrs["command"].startswith("python disk_task.py --accelerator=cpu")
    assert re.search(r"^reproduce: python disk_task.py .*--hidden=(4|16) ", output, re.M), output[-3000:]


def test_a_bad_value_a_bad_fixed_flag_and_a_missing_task_are_one_line_each(team: Path) -> None:
    (team / "bad.yaml").write_text("hidden: {choices: [0, 4]}\n")
    (team / "no_task.py").write_text("RATE = 1\n")
    data = f"--data-path={team / 'elsewhere' / 'data'}"
    cases = {
        ("--task", "disk_task", "--space", "bad.yaml", data): "error: --space: bad.yaml: 'hidden': 0 is refused: "
        "--hidden: must be a positive integer, got 0",
        ("--task", "disk_task", "--space", "space.yaml", "--data-path=nowhere"): "error: --data-path: nowhere is "
        "not a folder",
        ("--task", "no_such_task", "--space", "space.yaml"): "error: --task: no module named 'no_such_task'; give ",
        ("--task", "no_task.py", "--space", "space.yaml"): "error: --task: no_task.py has no TASK; define TASK = ",
    }
    runs = enumerate(cases.items())
    started = [(sweep(team, *args, "--output-dir", f"refused-{i}", *SMALL), want) for i, (args, want) in runs]
    for i, (process, want) in enumerate(started):
        output = process.communicate(timeout=300)[0].strip()
        assert process.returncode == 2 and output.startswith(want) and "\n" not in output, (want, output)
        assert not (team / f"refused-{i}").exists(), "nothing is made for a refused sweep"


def test_a_key_that_is_no_option_of_the_teams_task_is_refused_naming_its_script_not_train_py(
    team: Path, toy: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(team)
    (team / "image.yaml").write_text("image_size: {choices: [32, 64]}\n")
    with pytest.raises(SystemExit) as exit_info:  # in this process: sweep.py's body, as its cli calls it
        sweep_main(toy.TASK, team / "train.py", ["--task", "my_task", "--space", "image.yaml", "--output-dir", "never"])
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip()
    script = re.escape("python ") + r"\S*my_task\.py"
    said = rf"error: --space: image.yaml: 'image_size' is not an option of {script} \(see {script} --help\)"
    assert re.fullmatch(said, line), line
    assert not (team / "never").exists()


def test_two_workers_side_by_side_never_draw_the_same_values(team: Path) -> None:
    """A SLURM array's tasks start together on one study: each once drew the same sequence from the same seed."""
    storage = f"journal:{team / 'side-by-side.journal'}"
    flags = ["--task", "my_task", "--space", "space.yaml", "--trials", "4", "--pruner", "none", "--storage", storage]
    workers = [sweep(team, *flags, "--output-dir", "side-by-side", *SMALL, "--max-epochs=1") for _ in range(2)]
    outputs = [worker.communicate(timeout=600)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    assert all(re.search(r"^trial \d+ started", output, re.M) for output in outputs), "each worker ran trials"
    lrs = drawn(storage)
    assert len(lrs) == 4 and len(set(lrs.values())) == 4, lrs


def test_a_sweep_continued_after_sigterm_draws_new_values(team: Path) -> None:
    """The rerun continues the interrupted trial with its values, then draws what it never drew before the stop."""
    storage = f"journal:{team / 'continued.journal'}"
    flags = ["--task", "my_task", "--space", "space.yaml", "--trials", "2", "--pruner", "none", "--storage", storage]
    flags += ["--output-dir", "continued", *SMALL, "--max-epochs=6"]
    first = sweep(team, *flags)
    assert first.stdout is not None
    started = any(line.startswith("trial 0 started") for line in first.stdout)  # reads up to that line
    assert started, first.communicate()[0]
    os.killpg(first.pid, signal.SIGTERM)  # as timeout, SLURM or a terminal stops the sweep and its trial
    output = first.communicate(timeout=300)[0]
    assert first.returncode == 128 + signal.SIGTERM, output
    again = sweep(team, *flags)  # the same command, as the stop's message says
    output = again.communicate(timeout=600)[0]
    assert again.returncode == 0, output
    assert "trial 1 started (continuing trial 0)" in output, output
    lrs = drawn(storage)
    assert sorted(lrs) == [0, 1, 2] and lrs[1] == lrs[0] and lrs[2] != lrs[0], lrs


def test_sweeps_started_at_once_on_a_new_sqlite_study_all_run(team: Path) -> None:
    """Several workers creating one new database's tables at once: the losers once exited 2 blaming the storage."""
    storage = f"sqlite:///{team / 'at-once.db'}"
    flags = ["--task", "my_task", "--space", "space.yaml", "--trials", "1", "--pruner", "none", "--storage", storage]
    workers = [sweep(team, *flags, "--output-dir", "at-once", *SMALL, "--max-epochs=1") for _ in range(4)]
    outputs = [worker.communicate(timeout=600)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0] * 4, outputs
    study = optuna.load_study(study_name="sweep", storage=storage)
    assert [t.state for t in study.trials].count(optuna.trial.TrialState.COMPLETE) == 1, outputs
