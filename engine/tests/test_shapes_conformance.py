"""Module shapes beside the guide's regressor pass the whole conformance suite, on 1 and 2 ranks: a GAN in
Lightning's basic-GAN shape (manual optimization, two Adams, two networks in a ModuleDict, no loss returned), an
LSTM forecaster with its own configure_optimizers, which declares compile off, and a DDPM that keeps an average of its
weights in its own on_train_batch_end, with its own AdamW, a per-step cosine and two validation loaders. The suite, on
a GAN whose resume a planted defect changes, blames the engine; on the DDPM saved in Lightning's own callback order,
before the module's hook, it fails the hard kill."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_gpu_engine import TaskConformance
from lightning_gpu_engine.testing.script_runs import ConformanceRuns

TEAM = Path(__file__).parent / "team_tasks"

# A checkpoint load that writes a weight decay into the GAN's own Adams, as resume_changes.py once did to every
# optimizer: an engine defect, planted in a copy of the GAN's script
PLANTED = """
import runpy, sys
from lightning_gpu_engine.reliability.resume_changes import RunRecord

loaded = RunRecord.on_load_checkpoint

def on_load_checkpoint(self, trainer, pl_module, checkpoint):
    loaded(self, trainer, pl_module, checkpoint)
    for optimizer in checkpoint["optimizer_states"]:
        for group in optimizer["param_groups"]:
            group["weight_decay"] = 0.05

RunRecord.on_load_checkpoint = on_load_checkpoint
sys.argv[0] = {gan!r}
runpy.run_path({gan!r}, run_name="__main__")
"""


class TestTheGan(TaskConformance):
    script = str(TEAM / "gan.py")
    # 64 points in batches of 16: 4 steps an epoch (on 2 ranks, batches of 8), validated, then 2 more
    tiny = ("--samples", "64", "--latent", "4", "--hidden", "8", "--max-steps", "6")
    bad = ("--latent", "0")

    def test_the_suite_blames_the_engine_when_a_checkpoint_load_changes_a_saved_value(
        self, runs: ConformanceRuns, tmp_path: Path
    ) -> None:
        planted = tmp_path / "gan_with_a_planted_load.py"
        planted.write_text(PLANTED.format(gan=str(runs.script)))
        broken = ConformanceRuns(planted, self.tiny, tmp_path / "runs", self.timeout)
        broken.done["tiny"] = runs.tiny()  # the uninterrupted run loads nothing: the GAN's own serves
        for name in ("tiny", "tiny.dump"):
            (broken.tmp / name).symlink_to(runs.tmp / name)
        changed = r"resume: optimizer 0, param group 0: weight_decay is 0\.05, not 0 after SIGTERM \+ --resume last: "
        engine = "the checkpoint load changed a value it saved. That is the engine's doing"
        with pytest.raises(AssertionError, match=f"^{changed}{engine}"):
            self.test_sigterm_then_resume_last_ends_bit_identical(saving=(), ranks=1, runs=broken)


class TestTheLstmForecaster(TaskConformance):
    script = str(TEAM / "sequence.py")
    tiny = ("--samples", "64", "--window", "6", "--hidden", "4", "--max-steps", "6")
    bad = ("--window", "0")


# The engine's saves in Lightning's own order, each before the module's hook of its moment: the order that lost the
# DDPM's last update of its average to a hard kill
LIGHTNINGS_ORDER = """
import runpy
from lightning_gpu_engine.checkpoint.after_hooks import SaveAfterHooks

SaveAfterHooks.on_fit_start = lambda self, trainer, pl_module: None
runpy.run_path({ddpm!r}, run_name="__main__")
"""


class TestTheDiffusionModel(TaskConformance):
    script = str(TEAM / "ddpm.py")
    # 64 points in batches of 16: 4 steps an epoch (on 2 ranks, batches of 8), validated on both loaders, then 2 more
    tiny = ("--samples", "64", "--hidden", "8", "--timesteps", "8", "--max-steps", "6")
    bad = ("--timesteps", "0")

    def test_saved_before_its_own_hook_the_average_fails_the_hard_kill(
        self, runs: ConformanceRuns, tmp_path: Path
    ) -> None:
        planted = tmp_path / "ddpm_in_lightnings_order.py"
        planted.write_text(LIGHTNINGS_ORDER.format(ddpm=str(runs.script)))
        broken = ConformanceRuns(planted, self.tiny, tmp_path / "runs", self.timeout)
        broken.done["tiny"] = runs.tiny()  # uninterrupted, each save's moment changes nothing: the DDPM's own serves
        for name in ("tiny", "tiny.dump"):
            (broken.tmp / name).symlink_to(runs.tmp / name)
        lost = r"resume: buffer ema\S* differs after SIGKILL after the periodic checkpoint of step 2 \+ --resume last"
        with pytest.raises(AssertionError, match=f"^{lost}"):
            self.test_sigkill_after_a_periodic_checkpoint_then_resume_last_ends_bit_identical(ranks=1, runs=broken)
