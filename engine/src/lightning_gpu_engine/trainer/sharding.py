"""FSDP2: `fully_shard` per block, through Lightning's ModelParallelStrategy, for a task that sets `Task.fsdp2`.

PyTorch recommends FSDP2 over FSDP1: each parameter is a DTensor sharded on dim 0, with no flat buffers, so
parameter names, dtypes and the optimizer stay as they were, and it runs on CPUs (gloo) as well as GPUs. Each block
of the network (the engine's `block_types`, or the task's `wrap_policy`) is one unit: its parameters are gathered
just before it runs and freed after, and with --activation-checkpointing its activations are recomputed in the
backward pass. Checkpoints are gathered into one ordinary file on rank 0 (written atomically, loadable anywhere), or
with --checkpoint-format sharded written by every rank, its own shards (`sharded.py`).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn

from lightning_gpu_engine.checkpoint.saving import EveryRankWrites
from lightning_gpu_engine.config.cli import note
from lightning_gpu_engine.data.eval_split import ExactMeans

# --fsdp-sharding under FSDP2: whether a block's gathered parameters are freed after its forward pass
RESHARD_AFTER_FORWARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}


class FullyShard(EveryRankWrites, ExactMeans, ModelParallelStrategy):
    def __init__(
        self,
        blocks: set[type[nn.Module]],
        activation_checkpointing: bool,
        sharding: str,
        world_size: int,
        sharded_checkpoints: bool = False,
    ) -> None:
        # every process is one data-parallel rank (no tensor parallelism); with --checkpoint-format sharded each
        # writes its own shards, else they are gathered into one file on rank 0
        super().__init__(
            data_parallel_size=world_size, tensor_parallel_size=1, save_distributed_checkpoint=sharded_checkpoints
        )
        self.blocks, self.activation_checkpointing = blocks, activation_checkpointing
        self.reshard_after_forward = RESHARD_AFTER_FORWARD[sharding]

    def parallelize(self, net: nn.Module) -> None:
        """Shard `net` in place, block by block, then the rest (embeddings, final norm) as one more unit."""
        # The composable checkpoint, unlike checkpoint_wrapper, leaves module and parameter names as they are, so
        # checkpoints load into a network with or without --activation-checkpointing.
        from torch.distributed._composable import checkpoint
        from torch.distributed._composable.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        if any(isinstance(p, DTensor) for p in net.parameters()):
            return  # sharded already: a test after fit configures the same module again
        mesh = self.device_mesh["data_parallel"]
        options: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": self.reshard_after_forward}
        blocks = [m for m in net.modules() if type(m) in self.blocks]
        for block in blocks:
            if self.activation_checkpointing:
                checkpoint(block)
            fully_shard(block, **options)
        fully_shard(net, **options)
        if self.global_rank == 0:
            recomputed = ", activations recomputed" if self.activation_checkpointing else ""
            note(f"FSDP2: {len(blocks)} blocks and the rest sharded over {mesh.size()} processes{recomputed}")
