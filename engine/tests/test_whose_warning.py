"""A newcomer can tell which warnings matter: `warning: ` is the engine's and the team's own, a library's carries its
name (`lightning warning: `), the ones the engine knows to be harmless are not shown, and an epoch the step budget cut
short is not called done."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import TOY, guide_task, run_toy

# The guide's task, with the team's own warning where Lightning calls the task (its stacklevel points into Lightning),
# and its validation loss logged unsynced: what Lightning warns about under DDP
SETUP = "    def setup(self, stage: str) -> None:\n"
SYNCED = 'sync_dist=stage != "train"'


def test_lightnings_warnings_carry_its_name_the_harmless_are_silent_and_a_cut_epoch_is_not_done(
    tmp_path: Path,
) -> None:
    program = guide_task()
    assert SETUP in program and SYNCED in program, "the guide's task changed: find the places again"
    program = program.replace(SETUP, SETUP + '        __import__("warnings").warn("the team\'s own", stacklevel=2)\n')
    task = tmp_path / "my_task.py"
    task.write_text(program.replace(SYNCED, "sync_dist=False"))
    # bf16-mixed as --precision auto picks it on a CPU that runs it natively; DDP of one process, where Lightning warns
    # of unsynced values; a logging interval longer than the epoch; a step budget that ends inside the second epoch
    args = [*TOY, "--precision=bf16-mixed", "--strategy=ddp", "--devices=1", "--log-every-n-steps=50"]
    done = run_toy(task, *args, "--max-epochs=2", "--max-steps=6", f"--output-dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (done.stdout + done.stderr).splitlines()
    assert "not supported by the model summary" not in done.stdout + done.stderr, "harmless, and known so"
    ours = [line for line in lines if line.startswith("warning: ")]
    assert ours and set(ours) == {"warning: the team's own"}, ours
    lightning = [line for line in lines if line.startswith("lightning warning: ")]
    assert any("smaller than the logging interval Trainer(log_every_n_steps=50)" in line for line in lightning)
    assert any("self.log('val/loss', ..., sync_dist=True)" in line for line in lightning), lightning
    first, second = [line for line in lines if re.match(r"epoch \d/2 (done|stopped) ", line)]
    assert first.startswith("epoch 1/2 done in ") and ", step 4: " in first and " val/loss=" in first, first
    assert second.startswith("epoch 2/2 stopped at batch 2/4 by --max-steps=6 in "), second
    assert ", step 6: train/loss=" in second and "val/" not in second, "no validation ran in the second epoch"
