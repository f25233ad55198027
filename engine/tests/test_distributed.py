"""Scaling out on one CPU machine over gloo, the toy task's ranks: DDP and two "nodes" under torchrun. FSDP's set-up,
which needs a network of blocks, and the SLURM requeue, which needs the project's scripts/slurm.sbatch, are the
project's tests/image_classification/test_distributed.py's."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lightning_gpu_engine import read_checkpoint
from lightning_gpu_engine.checkpoint.saving import resume_path
from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.testing import processes, ranks
from lightning_gpu_engine.testing.machine_sharing import free_port, port_range
from lightning_gpu_engine.testing.processes import SAVING, Launch, finish, kill_at_pause, wait
from lightning_gpu_engine.testing.ranks import assert_ranks_agree, load_ranks
from lightning_gpu_engine.testing.reference_runs import ReferenceRuns

RANKS = str(Path(ranks.__file__))  # a script: Lightning starts the other ranks by running it again


def without_output_dir(args: list[str]) -> list[str]:
    return [arg for arg in args if not arg.startswith("--output-dir=")]


def test_resume_auto_takes_the_newest_checkpoint_or_starts_afresh(tmp_path: Path) -> None:
    cfg = Config(output_dir=str(tmp_path), resume="auto")
    assert resume_path(cfg.output_dir, cfg.resume) is None
    last, preempted = tmp_path / "checkpoints" / "last.ckpt", tmp_path / "hpc_ckpt_1.ckpt"
    last.parent.mkdir()
    last.touch()
    assert resume_path(cfg.output_dir, cfg.resume) == str(last)
    preempted.touch()
    os.utime(last, (1, 1))
    assert resume_path(cfg.output_dir, cfg.resume) == str(preempted)
    os.utime(preempted, (0, 0))
    assert resume_path(cfg.output_dir, cfg.resume) == str(last)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"activation_checkpointing": True}, "--activation-checkpointing: only applies with --strategy fsdp"),
        ({"fsdp_sharding": "NO_SHARD"}, "--fsdp-sharding: only applies with --strategy fsdp"),
        ({"resume": "lats"}, "--resume: give 'auto', 'last' or the path of a .ckpt file"),
    ],
)
def test_scale_out_options_are_checked_early(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config(strategy="ddp", **options)  # type: ignore[arg-type]


@pytest.mark.multiprocess
@SAVING
def test_two_ddp_ranks_agree_and_after_a_kill_mid_epoch_resume_to_the_weights_and_metrics_of_an_uninterrupted_run(
    formats: list[str], launch: Launch, references: ReferenceRuns, my_task: Path, tiny_args: list[str], tmp_path: Path
) -> None:
    """Sharded: both ranks write their share of the same tensors (DCP spreads them), in the background, and end as
    the uninterrupted run of one file (trained once for both ways of saving). The ranks meet on a port conftest.py
    drew from its worker's range, not one Lightning picks in the ephemeral range."""
    layout = ["--devices=2", "--strategy=ddp", "--samples=64", "--max-epochs=2"]  # 4 steps an epoch
    ddp = [sys.executable, RANKS, str(my_task)]
    whole_run = [*ddp, "{dump}", "0", *without_output_dir(tiny_args), *layout, "--output-dir={out}"]
    team = my_task.parent
    references.copy(
        whole_run, {"dump": tmp_path / "whole", "out": tmp_path / "uninterrupted"}, team, processes.script_env(team)
    )
    whole = load_ranks(tmp_path / "whole", 2)
    assert whole[0]["global_step"] == 8  # 64 samples / (batch 8 x 2 ranks) x 2 epochs
    assert_ranks_agree(whole, {"val/loss"})
    ports = {int(rank["master_port"]) for rank in whole}
    assert len(ports) == 1 and ports <= set(port_range()), ports
    args = [*tiny_args, *layout, *formats]

    # killed after the periodic checkpoint of step 6, mid-epoch, all ranks at once, as by the OOM killer or a lost node
    at = 6
    every = f"--checkpoint-every={at}steps"
    kill_at_pause(launch([*ddp, str(tmp_path / "killed"), str(at), *args, every]), at)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    saved = read_checkpoint(last)["global_step"]
    # --async-save: the step-6 save may still have been writing when the kill came; the epoch end's, step 4, remains
    assert saved == at or (formats and saved == 4), saved
    if formats:  # the ranks share the writing of the weights they hold alike (a buffer would be rank 0's alone)
        index = pickle.loads((last / ".metadata").read_bytes())  # the run's own file: trusted here
        weights = {where.relative_path for at, where in index.storage_data.items() if at.fqn.startswith("state_dict.")}
        assert weights == {"__0_0.distcp", "__1_0.distcp"}, "each rank wrote some of the weights"

    output = finish(launch([*ddp, str(tmp_path / "resumed"), "0", *args, every, "--resume=last"]))
    assert f"Restoring states from the checkpoint path at {last}" in output
    resumed = load_ranks(tmp_path / "resumed", 2)
    assert resumed[0]["global_step"] == 8
    assert_ranks_agree(resumed, {"val/loss"})
    for name, weight in whole[0]["params"].items():
        assert torch.equal(resumed[0]["params"][name], weight), name
    for metric in ("train/loss", "val/loss"):
        assert resumed[0]["metrics"][metric] == whole[0]["metrics"][metric], metric
    # validation.jsonl (what sweep.py prunes by): one line per validation from rank 0 alone, none again on resume
    for run in ("uninterrupted", "run"):
        record = [json.loads(line) for line in (tmp_path / run / "validation.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in record] == [0, 1] and record[-1]["val/loss"] == whole[0]["metrics"]["val/loss"]


@pytest.mark.multiprocess
def test_two_nodes_under_torchrun_train_as_one_job(
    launch: Launch, my_task: Path, tiny_args: list[str], tmp_path: Path
) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1"]
    torchrun += ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", "--rdzv-id=test", "--max-restarts=0"]
    cmd = [*torchrun, RANKS, str(my_task), str(tmp_path / "dump"), "0", *tiny_args, "--devices=1", "--num-nodes=2"]
    nodes = [launch(cmd) for _ in range(2)]
    outputs = [wait(node) for node in nodes]
    # both nodes' ends: a node whose rank failed takes the rendezvous store down, and the other says only that
    assert [node.returncode for node in nodes] == [0, 0], "\n----- node 1:\n".join(out[-3000:] for out in outputs)
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in "".join(outputs)
    assert_ranks_agree(load_ranks(tmp_path / "dump", 2), {"val/loss"})
    hparams = yaml.safe_load(next((tmp_path / "run" / "logs").rglob("hparams.yaml")).read_text())
    assert hparams["global_batch_size"] == 16  # batch 8 x 1 device x 2 nodes
