"""Two "nodes" on one machine, started as Lightning's own multi-node set-up is: NODE_RANK, MASTER_ADDR, MASTER_PORT.

A shared --output-dir is the normal case on a cluster: only the job's global rank 0 may lock it, and with
--checkpoint-format sharded each node's rank writes its part into the folder that rank 0 names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_gpu_engine import read_checkpoint
from lightning_gpu_engine.testing.machine_sharing import free_port
from lightning_gpu_engine.testing.processes import SAVING

LAUNCHERS = ("SLURM_NTASKS", "SLURM_JOB_NAME", "TORCHELASTIC_RUN_ID", "NODE_RANK", "RANK", "LOCAL_RANK", "WORLD_SIZE")


@pytest.mark.multiprocess
@SAVING
def test_two_nodes_sharing_an_output_dir_both_train_and_exit_0(
    formats: list[str], my_task: Path, tiny_args: list[str], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHERS}
    env |= {"OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    env["MASTER_PORT"] = str(free_port())
    command = [sys.executable, str(my_task), *tiny_args, "--devices=1", "--num-nodes=2", "--strategy=ddp"]
    command += ["--max-steps=4", *formats]
    nodes = [  # node 1 first, as in the report: whichever node starts first used to take the lock
        subprocess.Popen(
            command,
            cwd=my_task.parent,
            env={**env, "NODE_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for rank in (1, 0)
    ]
    try:
        outputs = [node.communicate(timeout=240)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                os.killpg(node.pid, 9)
    for node, output in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, output[-3000:]
    assert "another run" not in "".join(outputs)
    checkpoints = tmp_path / "run" / "checkpoints"
    last = read_checkpoint(checkpoints / "last.ckpt")
    assert last["global_step"] == 2  # 32 samples / (batch 8 x 2 nodes) per epoch, one epoch
    if formats:  # one part from each node's rank, and no folder but the ones the names point at
        assert sorted(p.name for p in (checkpoints / "last.ckpt").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
        named = {p.resolve() for p in checkpoints.glob("*.ckpt")}
        assert {p.resolve() for p in checkpoints.glob(".*.shards-*")} == named
    assert len((tmp_path / "run" / "validation.jsonl").read_text().splitlines()) == 1  # from global rank 0 only
