"""A SIGTERM to the process group while a validation runs: the run finishes that validation before it saves and stops,
so the resumed run ends with the same validation scores, best checkpoint and test score as an uninterrupted one.

Once the interrupted validation was lost: its epoch had no `val/*`, its best checkpoint never existed, and the final
test scored a different "best". Here with the image task's accuracy metrics and its best-by-val/acc checkpoint; the
engine's side is lightning-gpu-engine's tests/test_validation_stop.py's.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from conftest import run_script, run_train

# train.py, signalling its own process group (it leads one) at the first validation batch of the first epoch.
SIGNALS_ITSELF = """
import os, signal, sys
import lightning as L
import train
from lightning_gpu_engine.testing import trainers_with

class SigtermInValidation(L.Callback):
    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking and trainer.current_epoch == 0 and batch_idx == 0:
            os.killpg(os.getpgid(0), signal.SIGTERM)

trainers_with(SigtermInValidation())
train.main(sys.argv[1:])  # train.py's door, its exit included
"""


def outcome(result: subprocess.CompletedProcess[str], run: Path) -> tuple[str, list[str]]:
    """The summary line's scores, and the best checkpoints kept (their names carry epoch and val/acc)."""
    [scores] = re.findall(r"^best (val/acc=\S+\s+test/acc=\S+)", result.stdout, re.MULTILINE)
    return scores, sorted(p.name for p in (run / "checkpoints").glob("best-*.ckpt"))


def test_a_sigterm_during_validation_lets_it_finish_and_the_resumed_run_ends_as_an_uninterrupted_one(
    tiny_args: list[str], tmp_path: Path
) -> None:
    args = [a for a in tiny_args if not a.startswith("--output-dir=")] + ["--train-samples=64", "--max-epochs=2"]
    straight = run_train(*args, f"--output-dir={tmp_path / 'straight'}")
    assert straight.returncode == 0, straight.stderr[-3000:]

    script = tmp_path / "signals_itself.py"
    script.write_text(SIGNALS_ITSELF)
    stopped = run_script(script, *args, f"--output-dir={tmp_path / 'stopped'}", new_session=True)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert list((tmp_path / "stopped" / "checkpoints").glob("best-epoch000-*.ckpt")), "the first validation finished"

    resumed = run_train(*args, f"--output-dir={tmp_path / 'stopped'}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert outcome(resumed, tmp_path / "stopped") == outcome(straight, tmp_path / "straight")
