"""`TaskConformance`: the proof that a task keeps every engine feature, run through the door its users use.

    class TestMyTask(TaskConformance):
        script = "my_task.py"
        tiny = ("--hidden", "8", "--samples", "64", "--max-steps", "6")
        bad = ("--hidden", "0")

Every check runs the task's own script in a process of its own on the CPU (forked warm: testing/warm_starts.py), and a
failure names the promise it broke.
One uninterrupted tiny run, and its twin on two DDP ranks, are shared by the checks that read a finished run, and are
what a stopped and resumed run must equal: step, weights, optimizer and scheduler states, metrics and validations.
`tiny` needs a few training steps and a validation; the first epoch must outlast its first step.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from lightning_gpu_engine.testing.script_runs import (
    SUMMARY,
    ConformanceRuns,
    changed_setting,
    compile_off,
    first_difference,
    hardware_line,
    help_entries,
    last_checkpoint,
    summary_metrics,
    tail,
    validations,
    warned,
)

# --checkpoint-format sharded --async-save on two ranks: both write in the background, rank 0 alone what each holds as
# its own (BatchNorm's statistics), and the run resumes exactly too
SHARDED_ASYNC = ("--checkpoint-format=sharded", "--async-save")
STOP_ATTEMPTS = 3  # SIGTERM lands where the run is when it arrives: at an epoch's end, it proves less, so try again


class TaskConformance:
    """Subclass it in a test file, with `script`, `tiny` and `bad`: pytest then runs each check on the task."""

    __test__ = False  # the base is not a test; each subclass is
    script: ClassVar[str]  # the task's entry script, relative to `root`, or absolute
    # the project's folder, whose src/ the runs import as if it were installed; unset: pytest's working folder, which
    # is the project's when its tests run as `pytest` there
    root: ClassVar[Path | None] = None
    tiny: ClassVar[Sequence[str]]  # the task's own flags for a tiny valid run: a few steps and one validation
    bad: ClassVar[tuple[str, str]]  # an option and a value the task refuses
    timeout: ClassVar[float] = 600  # seconds a single run may take before it counts as hung
    # the checks that start several processes: a suite sharing its cores can run them one at a time
    multiprocess_checks: ClassVar[tuple[str, ...]] = ("test_two_devices_train_with_ddp_on_cpu",)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__test__ = "__test__" not in cls.__dict__ or bool(cls.__dict__["__test__"])

    @classmethod
    def project(cls) -> Path:
        return (cls.root or Path.cwd()).resolve()

    @classmethod
    def script_path(cls) -> Path:
        if (cls.project() / cls.script).is_file():
            return (cls.project() / cls.script).resolve()
        raise FileNotFoundError(f"{cls.__name__}.script: {cls.script} is not under {cls.project()} (see its root)")

    @classmethod
    def runs_in(cls, tmp: Path, script: Path | None = None) -> ConformanceRuns:
        """The runs of one check outside pytest's fixtures, e.g. to see a broken task fail it."""
        return ConformanceRuns(script or cls.script_path(), cls.tiny, tmp, cls.timeout, cls.project())

    @pytest.fixture(scope="class")
    def task_script(self) -> Path:
        return self.script_path()

    @pytest.fixture(scope="class")
    def runs(self, task_script: Path, tmp_path_factory: pytest.TempPathFactory) -> ConformanceRuns:
        return type(self).runs_in(tmp_path_factory.mktemp(type(self).__name__), task_script)

    def test_help_lists_the_options_with_their_reasons(self, runs: ConformanceRuns) -> None:
        shown = runs.help()
        assert shown.returncode == 0, f"help: --help exited {shown.returncode}:\n{tail(shown)}"
        usage = shown.stdout.splitlines()[0] if shown.stdout else ""
        assert usage.startswith(f"usage: {runs.script.name}"), f"help: the usage line names another script: {usage}"
        reasons = help_entries(shown.stdout)
        flag = self.bad[0].split("=")[0]
        assert flag in reasons, f"help: {flag}, the option of `bad`, is not listed in --help"
        silent = [f for f, why in reasons.items() if not why]
        assert not silent, f"help: {', '.join(silent)} listed without a reason; give each opt(default, why)"

    def test_a_bad_value_is_refused_in_one_line_exit_2_nothing_written(self, runs: ConformanceRuns) -> None:
        out, cwd = runs.tmp / "refused", runs.tmp / "refused-cwd"
        cwd.mkdir(exist_ok=True)
        flag, value = self.bad
        refused = runs.run(*runs.flags(out), flag, value, cwd=cwd)
        said = f"bad value: {flag} {value}"
        assert refused.returncode == 2, f"{said} exited {refused.returncode}, not 2:\n{tail(refused)}"
        lines = (refused.stdout + refused.stderr).strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{said} is not one error line:\n{tail(refused)}"
        assert flag.split("=")[0] in lines[0], f"{said}: the line does not name {flag}: {lines[0]}"
        written = [p.name for p in (out, *cwd.iterdir()) if p.exists()]
        assert not written, f"{said}: a refused run wrote {', '.join(written)}"

    def test_a_tiny_run_ends_with_the_summary_line_and_a_best_checkpoint(self, runs: ConformanceRuns) -> None:
        done = runs.tiny()
        assert hardware_line(done.stdout).startswith("hardware: cpu x1 |"), f"tiny run: no hardware line:\n{tail(done)}"
        last = done.stdout.strip().splitlines()[-1]
        found = SUMMARY.match(last)
        assert found, f"tiny run: the last line is not the summary line: {last}"
        assert found.group(1) == "best", f"tiny run: no best checkpoint (no validation in `tiny`?): {last}"
        best = list((runs.tmp / "tiny" / "checkpoints").glob("best-*.ckpt"))
        assert len(best) == 1, f"tiny run: {len(best)} best-*.ckpt files, not 1"

    def test_no_metric_is_synced_to_the_progress_bar_every_step(self, runs: ConformanceRuns) -> None:
        done = runs.tiny()
        said = warned(done.stdout + done.stderr, "progress-bar sync")
        assert not said, said[0].removeprefix("warning: ")

    def test_a_declared_channels_last_holds_in_training(self, runs: ConformanceRuns) -> None:
        if not runs.declares_channels_last():
            pytest.skip("the task does not declare channels_last")
        done = runs.tiny()
        assert "channels_last=True" in hardware_line(done.stdout), "channels_last: --channels-last did not turn it on"
        said = warned(done.stdout + done.stderr, "channels_last")
        assert not said, said[0].removeprefix("warning: ")

    @pytest.mark.parametrize(
        ("saving", "ranks"), [((), 1), (SHARDED_ASYNC, 2)], ids=["file-1-rank", "sharded-async-2-ranks"]
    )
    def test_sigterm_then_resume_last_ends_bit_identical(
        self, saving: tuple[str, ...], ranks: int, runs: ConformanceRuns
    ) -> None:
        layout = runs.two_ranks() if ranks == 2 else ()
        reference, folder = runs.uninterrupted(ranks)
        whole = last_checkpoint(folder)
        for attempt in range(STOP_ATTEMPTS):  # the stop lands where the run is when it arrives: mid-epoch, or retry
            out = runs.tmp / f"stopped{'-'.join(saving)}{ranks}{attempt}"
            stopped = runs.stopped(out, *saving, *layout)
            assert stopped.returncode in (0, 128 + signal.SIGTERM), (
                f"resume: SIGTERM to the process group mid-run exited {stopped.returncode}, not "
                f"{128 + signal.SIGTERM}:\n{tail(stopped)}"
            )
            saved = last_checkpoint(out) if stopped.returncode else None
            if saved is not None and not saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["is_last_batch"]:
                break
        else:
            raise AssertionError(
                f"resume: in {STOP_ATTEMPTS} tries SIGTERM never stopped the tiny run mid-epoch (it finished, or "
                "stopped at an epoch's end, first); give `tiny` a first epoch of more steps"
            )
        assert 0 < saved["global_step"] < whole["global_step"], "resume: SIGTERM did not stop the tiny run mid-way"
        resumed = runs.run(*runs.flags(out, *saving, *layout, "--resume=last"))
        assert resumed.returncode == 0, f"resume: --resume last exited {resumed.returncode}:\n{tail(resumed)}"
        got = last_checkpoint(out)
        kept = (saved.get("exact_resume") or {}).get("train_loader") is not None
        why = "something random or stateful outside the checkpoint"
        why = why if kept else "the task's loader does not resume mid-epoch (use engine train_loader)"
        steps = (got["global_step"], whole["global_step"])
        assert steps[0] == steps[1], f"resume: step {steps[0]} after SIGTERM + --resume last, not {steps[1]}"
        changed = changed_setting(whole["optimizer_states"], got["optimizer_states"])
        assert changed is None, (
            f"resume: {changed} after SIGTERM + --resume last: the checkpoint load changed a value it saved. That is "
            "the engine's doing (a resume must give a module's optimizers back as they were saved), not the task's: "
            "report it"
        )
        for name, weight in whole["state_dict"].items():
            same = name in got["state_dict"] and torch.equal(got["state_dict"][name], weight)
            assert same, f"resume: weight {name} differs after SIGTERM + --resume last: {why}"
        for part in ("optimizer_states", "lr_schedulers"):
            where = first_difference(whole[part], got[part])
            assert where is None, f"resume: {part}{where} differs after SIGTERM + --resume last: {why}"
        want, have = summary_metrics(reference.stdout), summary_metrics(resumed.stdout)
        assert have == want, f"resume: the metrics after SIGTERM + --resume last are {have}, not {want}: {why}"
        want_val, have_val = validations(folder), validations(out)
        assert have_val == want_val, f"resume: validations {have_val} after SIGTERM + --resume last, not {want_val}"

    def test_two_devices_train_with_ddp_on_cpu(self, runs: ConformanceRuns) -> None:
        done = runs.once("ddp", *runs.two_ranks())
        assert done.returncode == 0, f"ddp: --devices 2 exited {done.returncode}:\n{tail(done)}"
        assert hardware_line(done.stdout).startswith("hardware: cpu x2 |"), f"ddp: not two processes:\n{tail(done)}"
        assert "GLOBAL_RANK: 1" in done.stdout + done.stderr, "ddp: the second rank never joined"
        assert SUMMARY.match(done.stdout.strip().splitlines()[-1]), f"ddp: no summary line:\n{tail(done)}"

    def test_compile_captures_the_networks_and_does_not_recompile_after_the_first_step(
        self, runs: ConformanceRuns
    ) -> None:
        # torch's own inductor cache as set up, not the run's cold --compile-cache: a suite shares one across its
        # compiled runs (a recompile is dynamo's, whatever the cache holds)
        done = runs.once("compiled", "--compile", "--compile-cache=none")
        assert done.returncode == 0, f"compile: --compile exited {done.returncode}:\n{tail(done)}"
        said = warned(done.stdout + done.stderr, "compile")
        assert not said, said[0].removeprefix("warning: ")
        declared = compile_off(hardware_line(done.stdout))  # Task.compile_off, with no warning: nothing to check
        if declared:
            pytest.skip(f"compile: the task declares it off: {declared}")
        assert "compile=True" in hardware_line(done.stdout), f"compile: not on:\n{tail(done)}"
