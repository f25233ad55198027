"""Which launcher started this process (SLURM, torchrun, LSF, MPI or Lightning's own), read before any process
group exists: the cluster environment a Trainer gets, which process is global rank 0, and whether the other nodes
will come."""

from __future__ import annotations

import os
import signal

from lightning.pytorch.plugins.environments import (
    ClusterEnvironment,
    LightningEnvironment,
    LSFEnvironment,
    MPIEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError


def build_cluster_environments() -> list[ClusterEnvironment]:
    # scripts/slurm.sbatch has SLURM send SIGUSR1 90 s before the time limit: Lightning then saves
    # <output-dir>/hpc_ckpt_N.ckpt and runs `scontrol requeue`; the requeued job continues via --resume auto.
    # torchrun inside a SLURM allocation manages its own processes, so it keeps Lightning's TorchElastic detection.
    if SLURMEnvironment.detect() and not TorchElasticEnvironment.detect():
        return [SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)]
    return []


def launched_as_global_zero() -> bool:
    """Whether this process will be global rank 0, read from the launcher's environment before any process group.

    Lightning's `rank_zero_only.rank` is 0 on the first process of every node under a bare NODE_RANK launch, so it
    cannot pick the one process that locks a shared --output-dir. This asks the cluster environment that Lightning
    itself will choose (in its order); its own environment numbers processes by NODE_RANK (or GROUP_RANK) and
    LOCAL_RANK, which it sets for the processes it starts.
    """
    for env_type in (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment):
        if env_type.detect():
            return env_type().global_rank() == 0
    env = LightningEnvironment()
    return env.node_rank() == 0 and env.local_rank() == 0


def check_launcher(cfg: Config) -> None:
    """More than one node needs a launcher that starts the other nodes; without one the run waits for them forever."""
    if cfg.num_nodes == 1:
        return
    detected = (env.detect() for env in (SLURMEnvironment, TorchElasticEnvironment, LSFEnvironment, MPIEnvironment))
    # NODE_RANK: Lightning's own multi-node set-up; RANK and WORLD_SIZE: a Kubeflow PyTorchJob
    if not (any(detected) or "NODE_RANK" in os.environ or {"RANK", "WORLD_SIZE"} <= os.environ.keys()):
        raise ConfigError(
            "num_nodes",
            f"{cfg.num_nodes} nodes need a launcher on each (srun, torchrun, or MASTER_ADDR, MASTER_PORT and "
            "NODE_RANK set); none is here, so the run would wait for the other nodes forever",
        )
