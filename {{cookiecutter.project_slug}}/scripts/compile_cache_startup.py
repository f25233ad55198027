"""Seconds from `python train.py --compile` to the end of its first training step, as a job's restarts see them:

  cold       a fresh --output-dir, an empty compile cache: everything is compiled
  warm       a new run sharing the first one's cache (--compile-cache DIR)
  requeue    the first run again with --resume last, after a SIGTERM stopped it (what a preemption does)
  artifacts  a new run whose cache folder holds only the first run's artifacts.bin (another node, another disk)

Each run is stopped with SIGTERM once its first step is done. Every figure is printed and appended to --out as soon as
it is measured, with the device and versions. Arguments after `--` go to every train.py run, e.g.

  python scripts/compile_cache_startup.py --out startup.txt -- --accelerator cpu --model resnet18 --batch-size 8
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lightning_gpu_engine.bench import figures_file

ROOT = Path(__file__).resolve().parents[1]
FIRST_STEP = re.compile(
    r"^compile cache: first training step done ([\d.]+) s .* (\d+) compiled graphs from the cache, (\d+)"
)


def first_step(args: list[str], log: Path) -> str:
    """Runs train.py ARGS until its first training step is done, then stops it with SIGTERM; the figures in a line."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, str(ROOT / "train.py"), *args]
    started = time.monotonic()
    run = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    assert run.stdout is not None
    with log.open("a") as out:
        for line in run.stdout:
            out.write(line)
            found = FIRST_STEP.match(line)
            if found:
                seconds = time.monotonic() - started
                os.killpg(run.pid, signal.SIGTERM)  # saves last.ckpt after this step, as before a requeue
                run.communicate()
                cached = f"{found[2]} graphs from the cache, {found[3]} compiled"
                return f"{seconds:6.1f} s from the command to the first step done ({found[1]} s in-run; {cached})"
    run.wait()
    raise SystemExit(f"error: train.py exited {run.returncode} before its first training step; see {log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="text file the figures are appended to")
    parser.add_argument("--rounds", type=int, default=1, help="times the four runs are repeated, each afresh")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train.py's arguments")
    options = parser.parse_args()
    train_args = options.train_args[1:] if options.train_args[:1] == ["--"] else options.train_args
    say = figures_file(options.out, sys.argv)
    say(f"# train.py args: {shlex.join(train_args)} --compile (each run stopped by SIGTERM after its first step)")
    for round_ in range(1, options.rounds + 1):
        work = Path(tempfile.mkdtemp(prefix="compile-cache-startup-"))
        log = work / "train.log"
        first, cache, node2 = work / "first", work / "first" / "compile-cache", work / "node2-cache"
        base = [*train_args, "--compile"]
        say(f"round {round_} cold:      " + first_step([*base, f"--output-dir={first}"], log))
        say(
            f"round {round_} warm:      "
            + first_step([*base, f"--output-dir={work / 'warm'}", f"--compile-cache={cache}"], log)
        )
        say(f"round {round_} requeue:   " + first_step([*base, f"--output-dir={first}", "--resume=last"], log))
        node2.mkdir()
        shutil.copy(cache / "artifacts.bin", node2)
        say(
            f"round {round_} artifacts: "
            + first_step([*base, f"--output-dir={work / 'node2'}", f"--compile-cache={node2}"], log)
        )
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
