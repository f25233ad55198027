"""sweep.py through its command line: a tiny image sweep end to end, a sweep stopped and continued, workers sharing one
study while one of them is killed, and every refused input answered in one line."""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.image
import optuna
import pytest
import yaml
from conftest import ROOT, TINY, run_train, wait_until
from lightning_gpu_engine import testing
from lightning_gpu_engine.sweep import load_space
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from {{ cookiecutter.package_name }}.tasks.{{ cookiecutter.task.replace('-', '_') }} import TASK

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
PLOTS = ("history.png", "importances.png", "parallel_coordinates.png", "intermediate_values.png")


def start(*args: Any) -> subprocess.Popen[str]:
    """`python sweep.py ARGS` in a session of its own: its process group is what a terminal or SLURM signals."""
    command = [sys.executable, str(ROOT / "sweep.py"), *map(str, args)]
    return testing.popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=ENV, start_new_session=True
    )


def finish(process: subprocess.Popen[str], timeout: float = 600) -> str:
    try:
        return process.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.communicate()[0] + f"\nkilled: still running after {timeout:.0f} s"


def run_sweep(*args: Any) -> tuple[int, str]:
    process = start(*args)
    output = finish(process)
    return process.returncode, output


def records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "validation.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def load(storage: str) -> optuna.Study:
    if storage.startswith("journal:"):
        backend = JournalFileBackend(storage.removeprefix("journal:"))
        return optuna.load_study(study_name="sweep", storage=optuna.storages.JournalStorage(backend))
    return optuna.load_study(study_name="sweep", storage=storage)


def assert_real_png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG file"
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100 and image.std() > 0.01, f"{path} is blank"


def test_a_tiny_sweep_prunes_reports_plots_and_reproduces_its_best(tmp_path: Path) -> None:
    # the range where this tiny run's outcome depends on lr: above it, every trial ends at the same val/acc
    searched = space(tmp_path, "lr: {low: 1.0e-4, high: 3.0e-3, log: true}\nwarmup_fraction: {choices: [0.0, 0.2]}\n")
    out = tmp_path / "sweep"
    flags = ["--space", searched, "--trials", 8, "--parallel", 2, "--output-dir", out, *TINY, "--max-epochs=3"]
    code, output = run_sweep(*flags, "--weight-decay=0.01")
    assert code == 0, output[-4000:]
    assert len(re.findall(r"^trial \d+ started: lr=", output, re.M)) == 8
    assert re.search(r"^trial \d+ pruned after \d validation\(s\)$", output, re.M), output
    assert re.search(r"^trial \d+ finished: val/acc=[\d.]+  \(best so far: val/acc=", output, re.M), output

    study = load(f"sqlite:///{out / 'study.db'}")
    states = [t.state for t in study.trials]
    assert len(states) == 8 and TrialState.PRUNED in states and TrialState.FAIL not in states
    values = [float(t.value or 0) for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(values) >= 2 and max(values) > min(values), values
    for trial in study.trials:  # each a real run in its own folder, with its own options and the fixed ones
        folder = out / f"trial-{trial.number:04d}"
        saved = yaml.safe_load((folder / "config.yaml").read_text())
        assert saved["lr"] == pytest.approx(trial.params["lr"]) and saved["weight_decay"] == 0.01
        assert [r["epoch"] for r in records(folder)] == list(range(len(trial.intermediate_values)))

    best = study.best_trial
    report = (out / "report.txt").read_text()
    assert f"best: trial {best.number}, val/acc={best.value:.4f}, checkpoint " in report
    assert Path(re.search(r"checkpoint (\S+)", report).group(1)).is_file()  # type: ignore[union-attr]
    for name in PLOTS:
        assert_real_png(out / "plots" / name)
    code, again = run_sweep("--report", out)
    assert code == 0 and f"best: trial {best.number}, val/acc={best.value:.4f}" in again, again

    reproduce = shlex.split(re.search(r"^reproduce: python train.py (.*)$", report, re.M).group(1))  # type: ignore[union-attr]
    rerun = run_train(*[f for f in reproduce if not f.startswith("--output-dir")], f"--output-dir={tmp_path / 'again'}")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert max(r["val/acc"] for r in records(tmp_path / "again")) == pytest.approx(best.value)


def test_a_stopped_sweep_continues_its_interrupted_trial_from_its_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    searched = space(tmp_path, "lr: {low: 1.0e-3, high: 1.0e-2, log: true}\n")
    flags = ["--space", searched, "--trials", 2, "--pruner", "none", "--output-dir", out, *TINY, "--max-epochs=12"]
    first = start(*flags)
    trial = out / "trial-0000"
    wait_until(lambda: len(records(trial)) >= 2, first, "two validations of the trial")
    os.killpg(first.pid, signal.SIGTERM)  # as `timeout`, scancel or a terminal's Ctrl-C reach the whole group
    output = finish(first)
    assert first.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert "trial 0 interrupted" in output and (trial / "checkpoints" / "last.ckpt").is_file(), output[-3000:]
    stopped_at = len(records(trial))

    code, output = run_sweep(*flags)
    assert code == 0, output[-4000:]
    assert "trial 1 started (continuing trial 0)" in output, output
    study = load(f"sqlite:///{out / 'study.db'}")
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    assert study.trials[0].user_attrs["interrupted"] and study.trials[1].params == study.trials[0].params
    assert sorted(p.name for p in out.glob("trial-*")) == ["trial-0000", "trial-0002"]  # none run twice
    epochs = [r["epoch"] for r in records(trial)]
    assert stopped_at < 12 and epochs == list(range(12)), epochs  # it went on from its checkpoint: no epoch again
    assert [r["epoch"] for r in records(out / "trial-0002")] == list(range(12))


@pytest.fixture
def shared_storage(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL server of the test's own where the machine has one (Debian's postgresql package) and the driver;
    otherwise a journal file, as on a shared filesystem."""
    initdb = shutil.which("initdb") or next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))), None)
    if initdb is None or importlib.util.find_spec("psycopg") is None:
        yield f"journal:{tmp_path / 'study.journal'}"
        return
    binaries = Path(initdb).resolve().parent
    folder = Path(tempfile.mkdtemp(prefix="sweep-pg-"))  # outside tmp_path, whose parents only its owner can enter
    as_user = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        as_user = ["runuser", "-u", "nobody", "--"]
        os.chown(folder, pwd.getpwnam("nobody").pw_uid, -1)

    def postgres(program: str, *args: str, check: bool = True) -> None:
        subprocess.run([*as_user, str(binaries / program), *args], check=check, capture_output=True)

    data = str(folder / "data")
    postgres("initdb", "-D", data, "-U", "postgres", "--auth=trust")
    server = f"-k {folder} -c listen_addresses='' -p 5432"  # a socket in its own folder: no port to collide on
    postgres("pg_ctl", "-D", data, "-l", str(folder / "log"), "-o", server, "-w", "start")
    try:
        yield f"postgresql+psycopg://postgres@/postgres?host={folder}&port=5432"
    finally:
        postgres("pg_ctl", "-D", data, "-m", "immediate", "stop", check=False)
        shutil.rmtree(folder, ignore_errors=True)


def test_workers_on_one_storage_split_the_trials_and_continue_a_dead_ones(tmp_path: Path, shared_storage: str) -> None:
    out = tmp_path / "sweep"
    searched = space(tmp_path, "lr: {low: 1.0e-3, high: 1.0e-2, log: true}\n")
    flags = ["--space", searched, "--trials", 3, "--pruner", "none", "--storage", shared_storage, "--output-dir", out]
    flags += ["--heartbeat-timeout", 5, *TINY, "--max-epochs=6"]
    doomed, trial = start(*flags), out / "trial-0000"
    saved = lambda: len(records(trial)) >= 2 and (trial / "checkpoints" / "last.ckpt").is_file()  # noqa: E731
    wait_until(saved, doomed, "two validations and a checkpoint of the trial")
    os.killpg(doomed.pid, signal.SIGKILL)  # its machine dies: the worker and its trial, nothing marked or saved
    finish(doomed)

    workers = [start(*flags) for _ in range(2)]
    outputs = [finish(worker) for worker in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    started = [{int(n) for n in re.findall(r"^trial (\d+) started", o, re.M)} for o in outputs]
    assert not started[0] & started[1], outputs  # disjoint trials,
    study = load(shared_storage)
    complete = {t.number for t in study.trials if t.state == TrialState.COMPLETE}
    assert len(complete) == 3 and started[0] | started[1] == complete, outputs  # adding up to the total
    assert sum("trial 0 lost: no heartbeat" in o for o in outputs) == 1, outputs  # taken over by one worker
    assert len({study.trials[n].user_attrs["output_dir"] for n in complete}) == 3
    epochs = [r["epoch"] for r in records(trial)]
    assert epochs.count(0) == 1 and set(epochs) == set(range(6)), epochs  # continued from its last epoch's checkpoint


def test_bad_spaces_storages_and_flags_are_refused_in_one_line_before_any_trial(tmp_path: Path) -> None:
    spaces = {
        "nope: 1": "'nope' is not an option of python train.py (see python train.py --help)",
        "output_dir: x": "'output_dir' is not every option of python train.py but",
        "lr: {low: 0.1, high: 0.01}": "'lr': low must be below high",
        "lr: {low: 0.0, high: 0.1, log: true}": "'lr': a log range needs low > 0",
        "batch_size: {low: 0.5, high: 64}": "'batch_size':",
        "model: {low: 1, high: 2}": "'model' is a str option: a range needs a number",
        "batch_size: {choices: [0, 8]}": "'batch_size': 0 is refused",
        "lr: {low: 1.0e-4}": "'lr': give a mapping with low and high",
        "lr: 0.1\nwarmup_fraction: [0.0, 0.2": ":2:27: expected ',' or ']', but got '<stream end>' (not valid YAML)",
    }
    cases = []
    for i, (text, want) in enumerate(spaces.items()):
        (tmp_path / f"space-{i}").mkdir()
        path = space(tmp_path / f"space-{i}", text)
        cases.append((["--space", path], f"error: --space: {path}{'' if want.startswith(':') else ': '}{want}"))
    good = space(tmp_path, "lr: {low: 1.0e-4, high: 1.0e-2, log: true}\n")
    cases += [
        (["--space", tmp_path / "missing.yaml"], "error: --space: cannot read"),
        (["--space", good, "--lr=0.1"], "error: --space: lr is both searched and fixed by a flag"),
        (["--space", good, "--image-size=0"], "error: --image-size:"),
        (["--space", good, "--trials", 0], "error: --trials: must be a positive integer, got 0"),
        (["--space", good, "--devices-per-trial", 0], "error: --devices-per-trial: must be a positive integer, got 0"),
        (["--space", good, "--heartbeat-timeout", 0], "error: --heartbeat-timeout: must be a positive number"),
        (["--space", good, "--storage", "redis://x"], "error: --storage: 'redis://x' is not sqlite:///PATH"),
        (["--space", good, "--storage", "journal:/no/such/folder/j.log"], "error: --storage: /no/such/folder does"),
        (["--space", good, "--storage", "sqlite:////no/such/folder/s.db"], "error: --storage: cannot open sqlite"),
        (["--space", good, "--storage", "postgresql+psycopg://u@127.0.0.1:9/db"], "error: --storage: cannot open"),
        (["--report", tmp_path / "never-swept"], "error: --report: no study in"),
        (["--space", good, "--output-dir", "/proc/sweep"], "error: --output-dir: cannot write in /proc ("),
        (["--space", good, "--storage", "journal:/proc/study.journal"], "error: --storage: cannot write /proc/study"),
    ]
    # the case's flags last: they win over the tiny run's
    runs = [(start("--output-dir", tmp_path / f"out-{i}", *TINY, *args), want) for i, (args, want) in enumerate(cases)]
    clean = 0
    for i, (process, want) in enumerate(runs):
        output = finish(process, timeout=300).strip()
        assert process.returncode == 2 and output.startswith(want) and "\n" not in output, (i, want, output)
        assert not (tmp_path / f"out-{i}").exists(), f"{want}: the sweep folder was left behind"
        clean += 1
    assert clean == len(cases) == 22


def test_without_the_sweep_extra_it_names_the_extra(tmp_path: Path) -> None:
    (tmp_path / "optuna").mkdir()  # an optuna that cannot be imported, first on the path
    (tmp_path / "optuna" / "__init__.py").write_text("raise ImportError('No module named optuna')\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), ENV["PYTHONPATH"]])}
    command = [
        sys.executable,
        str(ROOT / "sweep.py"),
        "--space",
        "configs/sweep.yaml",
        "--output-dir",
        str(tmp_path / "o"),
    ]
    result = testing.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    extra = "the `sweep` extra: pip install -e '.[sweep]'"
    assert result.stderr.strip() == f"error: sweep.py needs Optuna and matplotlib, {extra}"


def test_the_slurm_array_script_runs_a_worker_whose_trial_saves_on_the_time_limit_signal(tmp_path: Path) -> None:
    """scripts/sweep.sbatch run as SLURM runs an array task. Before the time limit SLURM signals the batch shell alone
    (--signal=B:TERM), which exec made sweep.py: the running trial must still save and be marked interrupted."""
    slurm = {"SLURM_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "0", "SLURM_NTASKS": "1", "SLURM_CPUS_PER_TASK": "1"}
    out, storage = tmp_path / "sweep", f"journal:{tmp_path / 'study.journal'}"
    searched = space(tmp_path, "lr: {low: 1.0e-3, high: 1.0e-2, log: true}\n")
    flags = ["--storage", storage, "--space", searched, "--trials", 1, "--output-dir", out, *TINY, "--max-epochs=12"]
    job = subprocess.Popen(
        ["bash", "scripts/sweep.sbatch", *map(str, flags)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**ENV, **slurm},
        start_new_session=True,
    )
    trial = out / "trial-0000"
    wait_until(lambda: len(records(trial)) >= 1, job, "a validation of the trial")
    os.kill(job.pid, signal.SIGTERM)  # the batch shell's PID only, not its group
    output = finish(job)
    assert job.returncode == 128 + signal.SIGTERM and "trial 0 interrupted" in output, output[-3000:]
    assert (trial / "checkpoints" / "last.ckpt").is_file() and load(storage).trials[0].user_attrs["interrupted"]


def test_the_shipped_space_searches_options_of_this_task() -> None:
    params = load_space(str(ROOT / "configs" / "sweep.yaml"), TASK)
    assert {p.name for p in params} == {"lr", "weight_decay", "warmup_fraction", "batch_size"}
    assert all(p.kind != "fixed" for p in params)
