"""The image task scaled out: FSDP's units are its residual blocks, under DDP each rank's share of the epoch's
training accuracy survives a kill, and scripts/slurm.sbatch requeues and resumes (the engine's DDP and torchrun are
its own suite's)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from conftest import SAVING, Launch, finish, free_port, kill_at_pause, wait, wait_until
from lightning.pytorch.strategies import FSDPStrategy
from lightning_gpu_engine import Config, build_trainer, fsdp_units, read_checkpoint, resolve_hardware
from lightning_gpu_engine.testing import assert_ranks_agree, load_ranks
from torch.distributed.fsdp import ShardingStrategy
from torchvision.models.resnet import BasicBlock, Bottleneck

from {{ cookiecutter.package_name }}.tasks.image_classification import TASK
from {{ cookiecutter.package_name }}.tasks.image_classification.module import (
    ImageClassifier,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.networks import (
    build_network,
)

DUMP_RANKS = str(Path(__file__).with_name("dump_ranks.py"))
VAL = {"val/acc", "val/balanced_acc", "val/loss"}  # what the task logs, reduced over the ranks
PAUSE_RANKS = str(Path(__file__).with_name("pause_ranks.py"))


def test_fsdp_units_are_the_residual_blocks() -> None:
    assert fsdp_units(TASK, build_network("resnet18", 6, 16)) == {BasicBlock}
    assert fsdp_units(TASK, build_network("resnet50", 6, 16)) == {Bottleneck}


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-mixed", torch.bfloat16), ("32-true", torch.float32)])
def test_fsdp_strategy_shards_each_block_checkpoints_it_and_follows_precision(
    precision: str, dtype: torch.dtype, tmp_path: Path
) -> None:
    cfg = Config(strategy="fsdp", fsdp_sharding="SHARD_GRAD_OP", activation_checkpointing=True, precision=precision)
    cfg = dataclasses.replace(cfg, output_dir=str(tmp_path), logger="csv")  # what build_trainer writes to
    # resolve_hardware refuses FSDP without CUDA, so resolve for CPU and swap in what a GPU would have given
    cpu = resolve_hardware(Config(accelerator="cpu", precision="32-true", strategy="ddp"))
    hw = dataclasses.replace(cpu, precision=precision)
    net = build_network("resnet18", 6, 16)
    strategy = build_trainer(cfg, hw, fsdp_units(TASK, net), task=TASK).strategy
    assert isinstance(strategy, FSDPStrategy)
    assert strategy.sharding_strategy is ShardingStrategy.SHARD_GRAD_OP
    for policy in (strategy.kwargs["auto_wrap_policy"], strategy._activation_checkpointing_kwargs["auto_wrap_policy"]):
        units = [m for m in net.modules() if policy(module=m, recurse=False, nonwrapped_numel=0)]
        assert len(units) == 8 and all(isinstance(m, BasicBlock) for m in units)
    mixed = strategy.mixed_precision_config
    assert mixed is not None and mixed.param_dtype == mixed.reduce_dtype == dtype
    unchecked = dataclasses.replace(cfg, activation_checkpointing=False)
    without = build_trainer(unchecked, hw, fsdp_units(TASK, net), task=TASK).strategy
    assert isinstance(without, FSDPStrategy) and not without._activation_checkpointing_kwargs


@pytest.mark.multigpu
@pytest.mark.multiprocess
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="FSDP needs two CUDA GPUs; Lightning refuses it on CPU")
def test_fsdp_on_two_gpus_trains_and_saves_a_plain_checkpoint(
    launch: Launch, tiny_args: list[str], tmp_path: Path
) -> None:
    precision = "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    args = [*tiny_args, "--accelerator=cuda", f"--precision={precision}", "--devices=2", "--no-compile"]
    flags = ["--strategy=fsdp", "--activation-checkpointing"]
    finish(launch([sys.executable, DUMP_RANKS, str(tmp_path / "dump"), *args, *flags, "--max-epochs=2"]))
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 4
    # a full (gathered) state dict with the plain module's names, so it loads without FSDP
    plain = ImageClassifier(class_names=list("abcdef"), image_size=16)
    assert checkpoint["state_dict"].keys() == plain.state_dict().keys()
    ranks = load_ranks(tmp_path / "dump", 2)
    assert ranks[0]["metrics"]["val/acc"] == ranks[1]["metrics"]["val/acc"]


@pytest.mark.multiprocess
def test_two_ddp_ranks_agree_and_after_a_kill_mid_epoch_resume_to_the_weights_and_metrics_of_an_uninterrupted_run(
    launch: Launch, tiny_args: list[str], tmp_path: Path
) -> None:
    """Each rank counts its own share of the epoch's accuracy until the epoch's end syncs them: every rank must get
    its own back."""
    args = [*tiny_args, "--devices=2", "--strategy=ddp", "--train-samples=64", "--max-epochs=2"]  # 4 steps an epoch
    ddp = [sys.executable, PAUSE_RANKS]
    finish(launch([*ddp, str(tmp_path / "whole"), "0", *args, f"--output-dir={tmp_path / 'uninterrupted'}"]))
    whole = load_ranks(tmp_path / "whole", 2)
    assert whole[0]["global_step"] == 8  # 64 samples / (batch 8 x 2 ranks) x 2 epochs
    assert_ranks_agree(whole, VAL)
    running = torch.load(tmp_path / "whole" / "running.pt", weights_only=True)
    # a step of the last epoch after which its accuracy so far is not the whole epoch's: a run resumed from there
    # reports the epoch's accuracy only if it counts the steps before the resume too
    at = next((step for step in (6, 5, 7) if running[step]["train_acc"] != running[8]["train_acc"]), None)
    assert at is not None, f"every step of the last epoch has the epoch's accuracy, so none tells: {running}"

    # killed after the periodic checkpoint of that step, all ranks at once, as by the OOM killer or a lost node
    every = f"--checkpoint-every={at}steps"
    kill_at_pause(launch([*ddp, str(tmp_path / "killed"), str(at), *args, every]), at)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == at

    output = finish(launch([*ddp, str(tmp_path / "resumed"), "0", *args, every, "--resume=last"]))
    assert f"Restoring states from the checkpoint path at {last}" in output
    resumed = load_ranks(tmp_path / "resumed", 2)
    assert resumed[0]["global_step"] == 8
    assert_ranks_agree(resumed, VAL)
    for name, weight in whole[0]["params"].items():
        assert torch.equal(resumed[0]["params"][name], weight), name
    for metric in ("train/acc", "train/loss", "val/acc", "val/loss"):
        assert resumed[0]["metrics"][metric] == whole[0]["metrics"][metric], metric
    # validation.jsonl (what sweep.py prunes by): one line per validation from rank 0 alone, none again on resume
    for run in ("uninterrupted", "run"):
        record = [json.loads(line) for line in (tmp_path / run / "validation.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in record] == [0, 1] and record[-1]["val/acc"] == whole[0]["metrics"]["val/acc"]


@SAVING
def test_slurm_sigusr1_checkpoints_requeues_and_the_next_start_resumes(
    formats: list[str], launch: Launch, tiny_args: list[str], tmp_path: Path
) -> None:
    """scripts/slurm.sbatch run as SLURM would, with `srun` and `scontrol` stubbed on the PATH and `python` as this
    environment's. The requeue kills the job right after the save: an --async-save one must be on disk by then."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    # srun: run the command in place, telling the test its pid. scontrol: note the request, then end the job the way
    # SLURM does after a requeue (SIGKILL once the grace time is over).
    (stubs / "srun").write_text(f'#!/bin/sh\necho $$ > {tmp_path}/train.pid\nexec "$@"\n')
    (stubs / "scontrol").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/scontrol.args\nkill -KILL $PPID\n')
    for stub in ("python", "srun", "scontrol"):
        (stubs / stub).chmod(0o755)
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1"}
    slurm |= {"SLURM_NNODES": "1", "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    slurm |= {"SLURM_CPUS_PER_TASK": "1", "SLURM_NODELIST": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env = {**slurm, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}"}
    # 30 steps an epoch: the signal comes after the first epoch's checkpoint, long before the last step
    steps = ["--train-samples=240", "--max-steps=120", "--max-epochs=100"]
    job = ["bash", "scripts/slurm.sbatch", *tiny_args, *formats, *steps]
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"

    first = launch(job, env)
    # after the first epoch's checkpoint the training loop, and Lightning's handlers, are running
    wait_until(last.exists, first, "the first epoch's checkpoint")
    os.kill(int((tmp_path / "train.pid").read_text()), signal.SIGUSR1)
    output = wait(first)
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "4242"], output[-3000:]
    saved = read_checkpoint(tmp_path / "run" / "hpc_ckpt_1.ckpt")
    assert 30 <= saved["global_step"] < 120

    output = finish(launch(job, env))
    assert f"Restoring states from the checkpoint path at {tmp_path / 'run' / 'hpc_ckpt_1.ckpt'}" in output
    assert read_checkpoint(last)["global_step"] == 120
