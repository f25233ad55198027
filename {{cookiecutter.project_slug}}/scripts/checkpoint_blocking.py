"""Seconds that training waits at each checkpoint save, for each way of saving:

  file           the default: the weights and optimizer state gathered on rank 0, written, then training goes on
  sharded        --checkpoint-format sharded: every rank writes its own part (torch.distributed.checkpoint)
  sharded-async  and --async-save: training waits only for a copy to host memory; the write goes on behind

Each is one train.py run that saves every --every steps; the wait is timed on every rank around
Trainer.save_checkpoint, which Lightning calls for every save (periodic, epoch end, best). Every figure is printed and
appended to --out as soon as it is measured, with the device and versions. Arguments after `--` go to every run:

  python scripts/checkpoint_blocking.py --out saves.txt -- --accelerator cpu --devices 2 --strategy ddp --model gpt2
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lightning_gpu_engine.bench import figures_file

ROOT = Path(__file__).resolve().parents[1]
MODES = {"file": [], "sharded": ["--checkpoint-format=sharded"]}
MODES["sharded-async"] = [*MODES["sharded"], "--async-save"]
# train.py with every save timed: Lightning starts the other ranks by running this same file again
TIMED = """import runpy, sys, time
import lightning as L
save = L.Trainer.save_checkpoint
def timed(self, *args, **kwargs):
    started = time.perf_counter()
    save(self, *args, **kwargs)
    seconds = time.perf_counter() - started
    print("save timed: rank %d step %d %.3f s" % (self.global_rank, self.global_step, seconds), flush=True)
L.Trainer.save_checkpoint = timed
runpy.run_path(TRAIN, run_name="__main__")
"""
TIMED_LINE = re.compile(r"save timed: rank (\d+) step (\d+) ([\d.]+) s")


def run(program: Path, args: list[str], log: Path) -> tuple[dict[int, list[float]], float]:
    """Seconds blocked per save, by rank, and the run's wall seconds."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(program), *args], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    log.write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise SystemExit(f"error: train.py exited {result.returncode}; see {log}")
    blocked: dict[int, list[float]] = {}
    for rank, _, seconds in TIMED_LINE.findall(result.stdout):
        blocked.setdefault(int(rank), []).append(float(seconds))
    return blocked, wall


def size(path: Path) -> int:
    """Bytes of a checkpoint file, or of a sharded folder's files."""
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="text file the figures are appended to")
    parser.add_argument("--every", type=int, default=2, help="steps between saves (--checkpoint-every Nsteps)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"which of {', '.join(MODES)}, comma-separated")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train.py's arguments")
    options = parser.parse_args()
    train_args = options.train_args[1:] if options.train_args[:1] == ["--"] else options.train_args
    say = figures_file(options.out, sys.argv)
    say(f"# train.py args: {shlex.join(train_args)} --checkpoint-every {options.every}steps")
    say("# mode: seconds training was blocked per save on rank 0 (median, max; all ranks' max) | saves | size | run s")
    work = Path(tempfile.mkdtemp(prefix="checkpoint-blocking-"))
    program = work / "timed_train.py"
    program.write_text(TIMED.replace("TRAIN", repr(str(ROOT / "train.py"))))
    for mode in options.modes.split(","):
        out = work / mode
        args = [*train_args, *MODES[mode], f"--checkpoint-every={options.every}steps", f"--output-dir={out}"]
        blocked, wall = run(program, args, work / f"{mode}.log")
        zero, everyone = blocked.get(0, [0.0]), [s for seconds in blocked.values() for s in seconds]
        last = (out / "checkpoints" / "last.ckpt").resolve()
        say(
            f"{mode:14s} {statistics.median(zero):7.3f} s median, {max(zero):7.3f} s max ({max(everyone):7.3f} s) | "
            f"{len(zero)} saves | {size(last) / 2**20:6.0f} MiB | {wall:5.0f} s"
        )
    say(f"# logs: {work}")


if __name__ == "__main__":
    main()
