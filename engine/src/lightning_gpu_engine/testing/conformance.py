"""`TaskConformance`: the proof that a task keeps every engine feature, run through the door its users use.

    class TestMyTask(TaskConformance):
        script = "my_task.py"
        tiny = ("--hidden", "8", "--samples", "64", "--max-steps", "6")
        bad = ("--hidden", "0")

Every check runs the task's own script in a process of its own on the CPU (forked warm: testing/warm_starts.py), and a
failure names the promise it broke.
One uninterrupted tiny run, and its twin on two DDP ranks, are shared by the checks that read a finished run, and are
what a stopped or killed and resumed run must equal (same_end.py): step, weights and buffers, optimizer and scheduler
states, every tensor the module holds, metrics, validations and logged values. The runs are watched (watched.py):
each rank's tensors at the end of fit are saved, and a run pauses for a SIGKILL, or signals itself, at a chosen step.
`tiny` needs a few training steps and a validation, a first epoch of 3 steps or more, and a second epoch.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from lightning_gpu_engine.testing.same_end import assert_resumed_like, why_differs
from lightning_gpu_engine.testing.script_runs import (
    SUMMARY,
    ConformanceRuns,
    Ended,
    compile_off,
    hardware_line,
    help_entries,
    last_checkpoint,
    steps_per_epoch,
    tail,
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
    multiprocess_checks: ClassVar[tuple[str, ...]] = (
        "test_two_devices_train_with_ddp_on_cpu",
        "test_sigkill_after_a_periodic_checkpoint_then_resume_last_ends_bit_identical",
        "test_sigterm_at_an_epochs_last_batch_and_the_next_ones_first_then_resume_ends_bit_identical",
    )

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
        whole = runs.uninterrupted(ranks)
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
        end = last_checkpoint(whole.folder)["global_step"]
        assert 0 < saved["global_step"] < end, "resume: SIGTERM did not stop the tiny run mid-way"
        resumed = runs.watched(out, *saving, *layout, "--resume=last")
        assert resumed.returncode == 0, f"resume: --resume last exited {resumed.returncode}:\n{tail(resumed)}"
        ended = Ended(resumed.stdout, out, runs.dump(out))
        assert_resumed_like(whole, ended, "SIGTERM + --resume last", why_differs(saved))

    @pytest.mark.parametrize("ranks", [1, 2], ids=["1-rank", "2-ranks"])
    def test_sigkill_after_a_periodic_checkpoint_then_resume_last_ends_bit_identical(
        self, ranks: int, runs: ConformanceRuns
    ) -> None:
        layout = runs.two_ranks() if ranks == 2 else ()
        whole = runs.uninterrupted(ranks)
        epoch = steps_per_epoch(whole)
        assert epoch >= 3, f"hard kill: the first epoch has {epoch} steps; give `tiny` 3 or more, to kill one inside"
        at = epoch // 2  # neither the epoch's first batch nor its last
        every, out = f"--checkpoint-every={at}steps", runs.tmp / f"killed{ranks}"
        killed = runs.killed(out, at, every, *layout)
        assert f"paused at step {at}" in killed.stdout, f"hard kill: the run never paused at step {at}:\n{tail(killed)}"
        saved = last_checkpoint(out)
        assert saved["global_step"] == at, f"hard kill: --checkpoint-every saved step {saved['global_step']}, not {at}"
        resumed = runs.watched(out, every, *layout, "--resume=last")
        assert resumed.returncode == 0, f"hard kill: --resume last exited {resumed.returncode}:\n{tail(resumed)}"
        how = f"SIGKILL after the periodic checkpoint of step {at} + --resume last"
        why = f"{why_differs(saved)}, or a save before the hooks of step {at} had run (the engine's doing)"
        ended = Ended(resumed.stdout, out, runs.dump(out))
        assert_resumed_like(whole, ended, how, why, unlogged=at - 1)  # the logger counts from 0

    @pytest.mark.parametrize("ranks", [1, 2], ids=["1-rank", "2-ranks"])
    def test_sigterm_at_an_epochs_last_batch_and_the_next_ones_first_then_resume_ends_bit_identical(
        self, ranks: int, runs: ConformanceRuns
    ) -> None:
        layout = runs.two_ranks() if ranks == 2 else ()
        whole = runs.uninterrupted(ranks)
        last, end = steps_per_epoch(whole), last_checkpoint(whole.folder)["global_step"]
        assert end > last, f"epoch edges: the tiny run ends at step {end}, with its first epoch; give `tiny` a second"
        out, said = runs.tmp / f"edges{ranks}", list[str]()  # each stop so far, in words
        for stop, where in ((last, "the first epoch's last batch"), (last + 1, "the second epoch's first")):
            resume = ("--resume=last",) if said else ()
            stopped = runs.watched(out, *layout, *resume, stop_at=stop)
            said.append(f"SIGTERM at step {stop} ({where})")
            assert stopped.returncode == 128 + signal.SIGTERM, (
                f"epoch edges: {said[-1]} exited {stopped.returncode}, not {128 + signal.SIGTERM}:\n{tail(stopped)}"
            )
            saved = last_checkpoint(out)
            assert saved["global_step"] == stop, f"epoch edges: {said[-1]} saved step {saved['global_step']}"
        resumed = runs.watched(out, *layout, "--resume=last")
        assert resumed.returncode == 0, f"epoch edges: --resume last exited {resumed.returncode}:\n{tail(resumed)}"
        how = f"{' and '.join(said)}, each + --resume last"
        assert_resumed_like(whole, Ended(resumed.stdout, out, runs.dump(out)), how, why_differs(saved))

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
