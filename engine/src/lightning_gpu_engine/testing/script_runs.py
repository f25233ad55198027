"""A task's script run as its users run it, in a process of its own on the CPU, and what its output says: the runs of
`testing.TaskConformance`, each done once and shared by the checks that read it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lightning_gpu_engine.checkpoint.checks import read_checkpoint
from lightning_gpu_engine.testing import warm_starts
from lightning_gpu_engine.testing.watched import watched

# Before the task's flags, which may replace them: a tiny epoch of a few batches, every step logged
DEFAULTS = ["--batch-size=16", "--max-epochs=2", "--logger=csv", "--log-every-n-steps=1"]
# After them: any CPU can run the checks, and each run costs seconds
PINNED = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--num-workers=0", "--no-compile"]
SUMMARY = re.compile(r"^(best|last) (\S+)=.*\bcheckpoints: (.+)$")


def help_entries(text: str) -> dict[str, str]:
    """Each option of an argparse --help and its reason (the help text without '(default: ...)')."""
    entries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        entry = re.match(r"^  (-\S.*?)(?:\s{2,}(.*))?$", line)
        if entry:
            flags = re.findall(r"--[\w-]+", entry.group(1)) or [entry.group(1).split()[0]]
            current = entries.setdefault(flags[0].rstrip(","), [entry.group(2) or ""])
        elif current is not None and line.startswith("   "):
            current.append(line.strip())
        else:
            current = None
    said = {flag: " ".join(words) for flag, words in entries.items()}
    return {flag: re.sub(r"\(default: .*?\)|\[the task's default.*?\]", "", why).strip() for flag, why in said.items()}


def warned(output: str, promise: str) -> list[str]:
    """The engine's `warning: <promise>: ...` lines (promises.py) in a run's output."""
    return [line for line in output.splitlines() if line.startswith(f"warning: {promise}:")]


def hardware_line(stdout: str) -> str:
    return next((line for line in stdout.splitlines() if line.startswith("hardware: ")), "")


def compile_off(hardware: str) -> str | None:
    """Why the hardware line says compile is off for the task (`compile=off (<why>)`), if it does."""
    found = re.search(r"\bcompile=off \((.*?)\) (?:channels_last|pin_memory)=", hardware)
    return found.group(1) if found else None


def first_difference(want: Any, have: Any, path: str = "") -> str | None:
    """Where two parts of checkpoints differ (`[0]['state'][3]['exp_avg']`), or None: tensors bit for bit."""
    if isinstance(want, torch.Tensor) or isinstance(have, torch.Tensor):
        same = isinstance(want, torch.Tensor) and isinstance(have, torch.Tensor) and want.shape == have.shape
        return None if same and want.dtype == have.dtype and torch.equal(want, have) else path
    if isinstance(want, Mapping) and isinstance(have, Mapping):
        keys = sorted(set(want) | set(have), key=str)
        pairs = [(f"{path}[{k!r}]", want.get(k), have.get(k)) for k in keys]
    elif isinstance(want, list | tuple) and isinstance(have, list | tuple) and len(want) == len(have):
        pairs = [(f"{path}[{i}]", w, h) for i, (w, h) in enumerate(zip(want, have, strict=True))]
    else:
        return None if want == have else path
    return next((where for p, w, h in pairs if (where := first_difference(w, h, p)) is not None), None)


def changed_setting(want: list[dict[str, Any]], have: list[dict[str, Any]]) -> str | None:
    """The first setting (lr, weight_decay, betas, ...) of a param group that differs between two checkpoints'
    optimizer states, said in words; None where all are the same. The task's code sets none of them mid-run but
    through its schedulers, which a resume restores: a difference is what a checkpoint load changed."""
    for i, (before, after) in enumerate(zip(want, have, strict=False)):
        for j, (old, new) in enumerate(zip(before["param_groups"], after["param_groups"], strict=False)):
            for key in sorted(set(old) | set(new) - {"params"}):
                if first_difference(old.get(key), new.get(key)) is not None:
                    return f"optimizer {i}, param group {j}: {key} is {new.get(key)}, not {old.get(key)}"
    return None


def summary_metrics(stdout: str) -> dict[str, str]:
    """The summary line's `name=value` pairs before the throughput: what the run reports as its result."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    return dict(re.findall(r"(\S+)=(\S+)", line.split("train throughput=")[0]))


@dataclass
class Ended:
    """A finished run: what it printed, its output folder, and its watched ranks' tensors (watched.py)."""

    stdout: str
    folder: Path
    dump: Path


class ConformanceRuns:
    """The task's script run with the suite's flags, each named run once (a class shares them)."""

    def __init__(self, script: Path, tiny: Sequence[str], tmp: Path, timeout: float, root: Path | None = None) -> None:
        """`root`: the project, whose src/ the runs import as if the project were installed (unset: the script's
        folder)."""
        self.script, self.tiny_flags, self.tmp, self.timeout = script, tiny, tmp, timeout
        self.src = (root or script.parent) / "src"
        tmp.mkdir(parents=True, exist_ok=True)
        self.done: dict[str, subprocess.CompletedProcess[str]] = {}

    def command(self, *args: str, script: Path | None = None) -> tuple[list[str], dict[str, str]]:
        """`script`: the run's watched copy (watched.py), in place of the task's script."""
        path = os.pathsep.join(p for p in (str(self.src), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
        env.setdefault("OMP_NUM_THREADS", "1")  # a tiny network gains nothing from more threads than processes
        return [sys.executable, str(script or self.script), *args], env

    def run(self, *args: str, cwd: Path | None = None, script: Path | None = None) -> subprocess.CompletedProcess[str]:
        cmd, env = self.command(*args, script=script)
        cwd = cwd or self.script.parent
        options: dict[str, Any] = dict(timeout=self.timeout, cwd=cwd, env=env, start_new_session=script is not None)
        try:  # a watched run may signal its own process group: a session of its own
            return warm_starts.run(cmd, capture_output=True, text=True, **options)
        except subprocess.TimeoutExpired as err:  # a hang fails its check with what the run printed
            out, errors = (s.decode() if isinstance(s, bytes) else s or "" for s in (err.stdout, err.stderr))
            return subprocess.CompletedProcess(cmd, -9, out, f"{errors}\nkilled: still running after {err.timeout} s")

    def flags(self, out: Path, *extra: str) -> list[str]:
        layout = ["--channels-last"] if self.declares_channels_last() else []
        return [*DEFAULTS, *self.tiny_flags, *layout, *PINNED, f"--output-dir={out}", *extra]

    def once(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `name` (tiny, ddp, ...) with the suite's flags and `args`, watched, unless it has been run."""
        if name not in self.done:
            self.done[name] = self.run(*args) if name == "help" else self.watched(self.tmp / name, *args)
        return self.done[name]

    def watched(
        self, out: Path, *args: str, pause_after: int = 0, stop_at: int = 0
    ) -> subprocess.CompletedProcess[str]:
        """The run into `out`, watched (watched.py): its ranks' tensors at the end of fit in `dump(out)`."""
        script = watched(self.watch_folder(out), self.script, self.dump(out), pause_after, stop_at)
        return self.run(*self.flags(out, *args), script=script)

    def watch_folder(self, out: Path) -> Path:
        return out.with_name(f"{out.name}.watched")

    def dump(self, out: Path) -> Path:
        return out.with_name(f"{out.name}.dump")

    def help(self) -> subprocess.CompletedProcess[str]:
        return self.once("help", "--help")

    def declares_channels_last(self) -> bool:
        return "--channels-last" in help_entries(self.help().stdout)

    def two_ranks(self) -> tuple[str, ...]:
        """Two DDP ranks, each with half the batch when it halves: the global batch and the epoch's steps as on one,
        so that a SIGTERM after the first step lands mid-epoch there too."""
        flags, size = [*DEFAULTS, *self.tiny_flags], "1"
        for flag, after in zip(flags, [*flags[1:], ""], strict=True):  # the last one given counts
            if flag.startswith("--batch-size"):
                size = flag.split("=", 1)[1] if "=" in flag else after
        halved = [f"--batch-size={int(size) // 2}"] if size.isdigit() and int(size) % 2 == 0 else []
        return ("--devices=2", *halved)

    def uninterrupted(self, ranks: int) -> Ended:
        """The finished tiny run on 1 rank or 2."""
        if ranks == 1:
            return Ended(self.tiny().stdout, self.tmp / "tiny", self.dump(self.tmp / "tiny"))
        done = self.once("ddp", *self.two_ranks())
        assert done.returncode == 0, f"ddp: --devices 2 exited {done.returncode}:\n{tail(done)}"
        return Ended(done.stdout, self.tmp / "ddp", self.dump(self.tmp / "ddp"))

    def tiny(self) -> subprocess.CompletedProcess[str]:
        """The uninterrupted tiny run; it must have finished for any check that reads it."""
        done = self.once("tiny")
        assert done.returncode == 0, f"tiny run: exited {done.returncode}:\n{tail(done)}"
        return done

    def stopped(self, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        """The tiny run, sent SIGTERM as a scheduler sends it (the whole process group) once training starts."""

        def started(line: str) -> bool:  # StopOnSignal's note at train start, or else the first progress line
            return "after the current step" in line or (" batch " in line and " step " in line)

        return self.signalled(out, extra, signal.SIGTERM, started)

    def killed(self, out: Path, step: int, *extra: str) -> subprocess.CompletedProcess[str]:
        """The tiny run, watched, killed with SIGKILL to its process group (the OOM killer, a lost node) once it says
        "paused at step STEP", after that step's periodic checkpoint."""
        script = watched(self.watch_folder(out), self.script, self.dump(out), pause_after=step)
        paused = f"paused at step {step}"
        return self.signalled(out, extra, signal.SIGKILL, lambda line: line.startswith(paused), script)

    def signalled(
        self,
        out: Path,
        extra: Sequence[str],
        signum: signal.Signals,
        when: Callable[[str], bool],
        script: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """The tiny run, `signum` sent to its process group at the first line it prints that `when` holds for."""
        cmd, env = self.command(*self.flags(out, *extra), script=script)
        pipe, merged = subprocess.PIPE, subprocess.STDOUT
        # a session of its own: a signal to its group reaches the run, its ranks and loader workers, and nothing else
        process = warm_starts.popen(
            cmd, stdout=pipe, stderr=merged, text=True, cwd=self.script.parent, env=env, start_new_session=True
        )
        assert process.stdout is not None
        watchdog = threading.Timer(self.timeout, os.killpg, (process.pid, signal.SIGKILL))  # a hang fails the check
        watchdog.start()
        lines = []
        for line in process.stdout:
            lines.append(line)
            if when(line):
                os.killpg(process.pid, signum)
                break
        rest = process.communicate()[0]
        hung = not watchdog.is_alive()  # the watchdog has fired
        watchdog.cancel()
        said = f"\nkilled: still running after {self.timeout} s" if hung else ""
        return subprocess.CompletedProcess(cmd, process.returncode, "".join(lines) + rest + said, "")


def last_checkpoint(out: Path) -> dict[str, Any]:
    path = out / "checkpoints" / "last.ckpt"
    assert path.exists(), f"resume: no {path.name} in {path.parent} after SIGTERM"
    return read_checkpoint(path)


def steps_per_epoch(ended: Ended) -> int:
    """The optimizer steps of one epoch of a finished watched run."""
    return int(torch.load(ended.dump / "rank0.pt", weights_only=True)["steps_per_epoch"])


def validations(out: Path) -> list[str]:
    """The validations of every run in `out` (epoch, step, monitored value), one per line: ValidationRecord's."""
    path = out / "validation.jsonl"
    return path.read_text().splitlines() if path.is_file() else []


def tail(done: subprocess.CompletedProcess[str], chars: int = 3000) -> str:
    return (done.stdout + done.stderr)[-chars:]
