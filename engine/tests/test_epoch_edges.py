"""A stop at an epoch's edge resumes with the epoch count, the shuffle and the validations of the run never stopped.

The run sends itself SIGTERM at the edge, as a scheduler's would land there: in an epoch's last batch (Lightning
then saves after the epoch's end), in the next epoch's first, and between the epoch's last batch and its validation
(the stop waits for the next step); or SIGKILL early in the next epoch, which leaves the epoch end's own save. Each
stopped run is resumed with `--resume last` and ends bit for bit as the uninterrupted one, on a budget of steps or of
epochs, validating with --val-every or at each epoch's end, through the guide's task script and a team's GAN (manual
optimization, two optimizers), and on two DDP ranks.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from lightning_gpu_engine.testing.reference_runs import ReferenceRuns

from .conftest import TOY, assert_ended_alike, run_toy, signalling_task, uninterrupted

GAN = Path(__file__).parent / "team_tasks" / "gan.py"
BATCH_START = "on_train_batch_start(self, trainer, pl_module, batch, batch_idx)"
VALIDATION_START = "on_validation_start(self, trainer, pl_module)"
# 32 samples in batches of 8: 4 steps an epoch. Each edge: where the signal is sent, which, and the step resumed from.
EDGES = {
    "in an epoch's last batch": (BATCH_START, "trainer.current_epoch == 1 and batch_idx == 3", signal.SIGTERM, 8),
    "in an epoch's first batch": (BATCH_START, "trainer.current_epoch == 2 and batch_idx == 0", signal.SIGTERM, 9),
    "between an epoch's last batch and its validation": (
        VALIDATION_START,
        "not trainer.sanity_checking and trainer.global_step == 8",
        signal.SIGTERM,
        9,
    ),
    "by a kill after an epoch's end": (BATCH_START, "trainer.current_epoch == 2 and batch_idx == 1", signal.SIGKILL, 8),
    # --checkpoint-every 4steps falls due at each epoch's last batch: saved after the validation, at the epoch's end
    "by a kill in the validation after a save due at the epoch's last batch": (
        "on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0)",
        "not trainer.sanity_checking and trainer.global_step == 8",
        signal.SIGKILL,
        4,
    ),
}
# --max-steps 12 ends inside the 10 epochs the engine defaults to; --val-every 2 validates at each epoch's end too.
# The last batch on every budget: there the stop saves after the epoch's end, which Lightning restores by the budget.
CASES = [
    *((edge, ["--max-steps=12"]) for edge in EDGES if "save due" not in edge),
    (
        "by a kill in the validation after a save due at the epoch's last batch",
        ["--max-steps=12", "--checkpoint-every=4steps"],
    ),
    ("by a kill after an epoch's end", ["--max-epochs=3"]),
    ("in an epoch's last batch", ["--max-epochs=3"]),
    ("in an epoch's last batch", ["--max-steps=12", "--val-every=2"]),
]


def stop_and_resume(program: Path, args: list[str], edge: str, tmp_path: Path) -> Path:
    """`program` stopped `edge` and resumed to its end: its output folder."""
    hook, condition, signum, saved_at = EDGES[edge]
    out = tmp_path / "stopped"
    script = signalling_task(tmp_path / "stops.py", program, hook, f"trainer.global_rank == 0 and {condition}", signum)
    stopped = run_toy(script, *args, f"--output-dir={out}", new_session=True)
    assert stopped.returncode == (143 if signum == signal.SIGTERM else -signum), stopped.stderr[-3000:]
    saved = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["global_step"] == saved_at, f"stopped {edge}: saved at step {saved['global_step']}, not {saved_at}"
    resumed = run_toy(program, *args, f"--output-dir={out}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return out


@pytest.mark.parametrize(("edge", "budget"), CASES, ids=[f"{edge} {' '.join(budget)}" for edge, budget in CASES])
def test_the_guides_task_stopped_at_an_epochs_edge_resumes_as_if_never_stopped(
    edge: str, budget: list[str], my_task: Path, references: ReferenceRuns, tmp_path: Path
) -> None:
    args = [*TOY, *budget]
    want = uninterrupted(references, my_task, args, tmp_path / "uninterrupted")
    assert_ended_alike(want, stop_and_resume(my_task, args, edge, tmp_path), f"{edge} ({' '.join(budget)})")


@pytest.mark.parametrize("edge", EDGES)
def test_a_gan_stopped_at_an_epochs_edge_resumes_as_if_never_stopped(
    edge: str, references: ReferenceRuns, tmp_path: Path
) -> None:
    args = [*TOY, "--max-steps=12"]
    want = uninterrupted(references, GAN, args, tmp_path / "uninterrupted")
    assert_ended_alike(want, stop_and_resume(GAN, args, edge, tmp_path), f"{edge} (a GAN)")


@pytest.mark.multiprocess
def test_two_ddp_ranks_stopped_in_an_epochs_last_batch_resume_as_if_never_stopped(
    my_task: Path, references: ReferenceRuns, tmp_path: Path
) -> None:
    """Rank 0 signals the whole group, as a scheduler would: both ranks agree on the step, and the save is one."""
    args = [*TOY, "--devices=2", "--strategy=ddp", "--samples=64", "--max-steps=12"]  # still 4 steps an epoch
    want = uninterrupted(references, my_task, args, tmp_path / "uninterrupted")
    edge = "in an epoch's last batch"
    assert_ended_alike(want, stop_and_resume(my_task, args, edge, tmp_path), f"{edge} (two DDP ranks)")
