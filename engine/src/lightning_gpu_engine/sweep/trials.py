"""The trial loop: each trial a `train.py` (or --task's file) subprocess in SWEEP_DIR/trial-NNNN, pruned by its
validation record.

Subprocesses, not trials in this process: a crash, an out-of-memory or a hung CUDA context ends one trial, never the
sweep, and each trial gets the engine exactly as `python train.py` does (its signals, checkpoints and resume). Trials
share the sweep's process group, so a SIGTERM from `timeout`, SLURM or a terminal reaches them too: each saves its
`last.ckpt` and is recorded as interrupted; the same command (or another worker) then resumes it from there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import optuna
from optuna.trial import FrozenTrial, TrialState

from lightning_gpu_engine import last_path

from .space import Param, as_flag

POLL_S = 0.5  # how often a running trial's validation record is read
IDLE_POLL_S = 5.0  # how often a worker with nothing to start looks again (at most): light on a shared database


def resumed(trials: list[FrozenTrial]) -> set[int]:
    """Trials that a later trial continues in the same folder: that later trial stands for them."""
    return {t.user_attrs["resumes"] for t in trials if "resumes" in t.user_attrs}


def counted(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that make up the total: all but those continued by a later one, the interrupted ones waiting to be
    continued, and the surplus that two workers asked for at once."""
    later = resumed(trials)
    return [
        t
        for t in trials
        if t.number not in later and not t.user_attrs.get("interrupted") and "surplus" not in t.user_attrs
    ]


class Sweep:
    def __init__(
        self,
        study: optuna.Study,
        params: list[Param],
        train_argv: list[str],
        sweep_dir: Path,
        trials: int,
        metric: str,
        program: list[str],
        shown: str,
        slots: list[str | None],
        heartbeat_timeout: float,
    ) -> None:
        """`train_argv`: the fixed training flags; `program`: what follows `python` to train (train.py's path, a team's
        my_task.py, or -m team.my_task), `shown` as a user types it; `slots`: each parallel trial's
        CUDA_VISIBLE_DEVICES (or None); a running trial whose worker has not beaten for `heartbeat_timeout` seconds
        is taken as lost and continued."""
        self.study, self.params, self.train_argv, self.dir = study, params, train_argv, sweep_dir
        self.trials, self.metric, self.program, self.shown, self.slots = trials, metric, program, shown, slots
        self.timeout = heartbeat_timeout
        self.lock = threading.Lock()
        self.running: dict[int, subprocess.Popen[bytes]] = {}
        self.signum: int | None = None

    def run(self) -> int | None:
        """Trials until the study holds `trials`, none of them running; the stop signal's number if one came."""
        previous = {s: signal.signal(s, self._stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            workers = [threading.Thread(target=self._work, args=(slot,)) for slot in self.slots]
            for worker in workers:
                worker.start()
            while any(w.is_alive() for w in workers):  # the main thread stays free to take signals
                time.sleep(0.2)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return self.signum

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            print(f"stopping on {signal.Signals(signum).name}: running trials save and are resumed next time")
        with self.lock:  # a signal to this process alone (kill PID) reaches the trials too
            for process in self.running.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)

    def _work(self, slot: str | None) -> None:
        while self.signum is None:
            trial = self._next()
            if trial is not None:
                self._run(trial, slot)
            elif self._idle():
                return
            else:  # others' trials still run: one may yet be lost
                time.sleep(min(IDLE_POLL_S, self.timeout / 5))

    def _next(self) -> optuna.Trial | None:
        """A trial to run now: an interrupted or lost one first, then a new one while the total is not reached."""
        with self.lock:
            if self.signum is not None:
                return None
            trials = self.study.get_trials(deepcopy=False)
            self._continue_lost(trials)
            trials = self.study.get_trials(deepcopy=False)
            later = resumed(trials)
            for old in trials:  # continued with its parameters, in its folder, from its last.ckpt
                if old.user_attrs.get("interrupted") and old.number not in later:
                    self._enqueue_continuation(old)
            waiting = any(t.state == TrialState.WAITING for t in trials)
            if not waiting and len(counted(trials)) >= self.trials:
                return None
            trial = self.study.ask()
            if "resumes" not in trial.user_attrs and self._surplus(trial.number):
                trial.set_user_attr("surplus", True)
                self.study.tell(trial, state=TrialState.FAIL)
                return None
            return trial

    def _enqueue_continuation(self, old: FrozenTrial) -> None:
        attrs = {"resumes": old.number, "output_dir": old.user_attrs["output_dir"]}
        self.study.enqueue_trial(old.params, user_attrs=attrs)

    def _surplus(self, number: int) -> bool:
        """Whether trials before `number` already make the total: another worker asked between our count and ask."""
        before = [t for t in counted(self.study.get_trials(deepcopy=False)) if t.number < number]
        return len(before) >= self.trials

    def _continue_lost(self, trials: list[FrozenTrial]) -> None:
        """A running trial whose worker stopped beating (its machine died, or it was killed with SIGKILL) is failed
        and continued by this worker. Only the worker whose `tell` succeeds continues it."""
        now = time.time()
        for t in trials:
            beat = t.user_attrs.get("heartbeat") or (t.datetime_start.timestamp() if t.datetime_start else now)
            if t.state != TrialState.RUNNING or t.number in self.running or now - beat < self.timeout:
                continue
            try:
                self.study.tell(t.number, state=TrialState.FAIL)
            except (ValueError, RuntimeError):  # finished meanwhile, or another worker took it first
                continue
            print(f"trial {t.number} lost: no heartbeat for {now - beat:.0f} s; continuing it", flush=True)
            if "output_dir" in t.user_attrs:
                self._enqueue_continuation(t)

    def _idle(self) -> bool:
        """Whether this worker is done: nothing to ask, and no trial of the study still running anywhere (one that
        is may yet be lost, and this worker would continue it)."""
        trials = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
        with self.lock:
            return all(t.number in self.running for t in trials)  # those this process's other workers finish

    def _run(self, trial: optuna.Trial, slot: str | None) -> None:
        values = {p.name: p.suggest(trial) for p in self.params}
        out = Path(trial.user_attrs.get("output_dir") or self.dir / f"trial-{trial.number:04d}")
        flags = [*self.train_argv, *(f for name, value in values.items() for f in as_flag(name, value))]
        trial.set_user_attr("output_dir", str(out))
        trial.set_user_attr("command", " ".join([self.shown, *flags, f"--output-dir={out}"]))
        trial.set_user_attr("heartbeat", time.time())
        shown = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
        again = f" (continuing trial {trial.user_attrs['resumes']})" if "resumes" in trial.user_attrs else ""
        print(f"trial {trial.number} started{again}: {shown}", flush=True)
        out.mkdir(parents=True, exist_ok=True)
        if not last_path(out).exists():  # nothing to resume: a record left by a run killed unsaved is stale
            (out / "validation.jsonl").unlink(missing_ok=True)
        # A trial is a run of its own on this worker's devices, not a task of the worker's SLURM job
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env |= {"CUDA_VISIBLE_DEVICES": slot} if slot is not None else {}
        started = time.monotonic()
        with open(out / "train.log", "ab") as log:
            process = subprocess.Popen(
                [sys.executable, *self.program, *flags, f"--output-dir={out}", "--resume=auto"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            with self.lock:
                self.running[trial.number] = process
                if self.signum is not None:  # the stop came between asking for this trial and starting it
                    process.send_signal(signal.SIGTERM)
            reported: dict[int, float] = {}
            pruned = self._watch(trial, process, out / "validation.jsonl", reported)
            with self.lock:
                self.running.pop(trial.number)
        trial.set_user_attr("seconds", round(time.monotonic() - started, 1))
        self._tell(trial, process.returncode, pruned, out, reported)

    def _watch(
        self, trial: optuna.Trial, process: subprocess.Popen[bytes], record: Path, reported: dict[int, float]
    ) -> bool:
        """Report each validation as it is written (a continued trial's earlier ones too: they are its history), beat
        the heartbeat, and stop the trial once hopeless, by the SIGTERM on which it saves. Whether it was pruned.

        A validation is known by its number (monitors.ValidationRecord): the epoch's, or the multiple of --val-every."""
        pruned, beaten = False, time.time()
        while True:
            done = process.poll() is not None
            lines = record.read_text().splitlines() if record.is_file() else []
            for entry in map(json.loads, filter(None, lines)):
                if self.metric in entry and entry["validation"] not in reported:
                    reported[entry["validation"]] = float(entry[self.metric])
                    trial.report(reported[entry["validation"]], step=entry["validation"])
                    trial.set_user_attr("steps", entry["step"])
            if not pruned and not done and self.signum is None and reported and trial.should_prune():
                pruned = True
                process.send_signal(signal.SIGTERM)
            if done:
                return pruned
            if time.time() - beaten > self.timeout / 5:
                beaten = time.time()
                trial.set_user_attr("heartbeat", beaten)
            time.sleep(POLL_S)

    def _tell(self, trial: optuna.Trial, code: int, pruned: bool, out: Path, reported: dict[int, float]) -> None:
        if self.signum is not None and not pruned:
            trial.set_user_attr("interrupted", True)
            self.study.tell(trial, state=TrialState.FAIL)
            print(f"trial {trial.number} interrupted (exit {code}): continued from {out}/checkpoints next time")
        elif pruned:
            self.study.tell(trial, state=TrialState.PRUNED)
            print(f"trial {trial.number} pruned after {len(reported)} validation(s)", flush=True)
        elif code == 0 and reported:
            best = (max if self.study.direction == optuna.study.StudyDirection.MAXIMIZE else min)(reported.values())
            self.study.tell(trial, best)
            print(f"trial {trial.number} finished: {self.metric}={best:.4f}  (best so far: {self._best()})", flush=True)
        else:
            lines = (out / "train.log").read_text(errors="replace").strip().splitlines() or ["no output"]
            reason = next((line for line in reversed(lines) if line.startswith("error:")), lines[-1])
            reason = f"exit {code}: {reason}" if code else f"no {self.metric} was logged ({reason})"
            trial.set_user_attr("error", reason)
            self.study.tell(trial, state=TrialState.FAIL)
            print(f"trial {trial.number} failed: {reason}", flush=True)

    def _best(self) -> str:
        try:
            best = self.study.best_trial
        except ValueError:
            return "none yet"
        return f"{self.metric}={best.value:.4f}, trial {best.number}"
