"""Every performance switch, resolved once at start-up against the machine we actually run on.

Each choice says why it is on and when it is off. `resolve` only decides; `apply_backend_flags` is the one place that
changes global torch state.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import torch

from ..tasks.image_classification.decoding import torchcodec_available
from .config import Config, ConfigError, parse_devices, usable_cpus
from .resume import ignore_stop_signals


@dataclass(frozen=True)
class Hardware:
    accelerator: str  # "cuda", "cpu" or "mps": what Lightning's Trainer gets
    devices: int | list[int] | str
    world_size: int  # processes in the whole job
    precision: str
    compile: bool
    channels_last: bool
    pin_memory: bool
    num_workers: int
    cudnn_benchmark: bool
    device_name: str
    decode: str = "cpu"  # where --data folder images are decoded: "cpu" (loader workers) or "gpu" (nvJPEG)

    def summary(self) -> str:
        return (
            f"hardware: {self.device_name} x{self.world_size} | precision={self.precision} compile={self.compile} "
            f"channels_last={self.channels_last} pin_memory={self.pin_memory} workers/device={self.num_workers} "
            f"decode={self.decode} cudnn.benchmark={self.cudnn_benchmark}"
        )


def cpus_per_device(local_devices: int) -> int:
    """CPUs this process may use, per device it drives.

    `usable_cpus` is what the OS lets us run on, unlike os.cpu_count. Under SLURM, --cpus-per-task bounds each task
    even when the affinity mask is the whole node. With one task per device (srun, as scripts/slurm.sbatch launches)
    the task's CPUs all belong to its one device; with one task driving several devices (Lightning starts the other
    ranks itself) they are shared out."""
    cpus = usable_cpus()
    per_task = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if per_task.isdigit() and int(per_task) > 0:
        cpus = min(cpus, int(per_task))
        tasks = os.environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0].split(",")[0]
        if tasks.isdigit() and int(tasks) >= local_devices:
            return cpus
    return max(1, cpus // max(local_devices, 1))


def worker_context() -> BaseContext | None:
    """How loader workers start: forked, unless CUDA is already initialised in this process.

    A forked child inherits every object of the parent, CUDA tensors included (a model moved to the GPU, batches
    cached on it, the benchmark's earlier settings awaiting garbage collection). When the child's garbage collector
    frees one, the CUDA caching allocator runs in a process where CUDA cannot be initialised, and the worker dies
    ("CUDA error: initialization error" from ~TensorImpl): what killed bench.py's loader benchmark on an H100. Making
    sure nothing CUDA is reachable is not possible in general (Lightning moves the model to the GPU before it builds
    the loaders), so after CUDA is up the workers start from a clean forkserver process instead; they then receive
    the dataset by pickling, which ImageFiles (paths) and TensorDataset (shared memory) make cheap."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return multiprocessing.get_context("forkserver")
    return None


def worker_options(num_workers: int) -> dict[str, Any]:
    """DataLoader options of every loader of the project (training's and predict.py's): how many workers, how they
    start (`worker_context`), and that they leave stop signals to the main process (`resume.ignore_stop_signals`)."""
    context = worker_context() if num_workers > 0 else None
    return dict(num_workers=num_workers, multiprocessing_context=context, worker_init_fn=ignore_stop_signals)


def mostly_jpegs(names: Iterable[str], sample: int = 256) -> bool:
    """Most of the first `sample` file names are JPEGs: what GPU decoding is for."""
    seen = jpegs = 0
    for name in names:
        seen, jpegs = seen + 1, jpegs + name.lower().endswith((".jpg", ".jpeg"))
        if seen >= sample:
            break
    return seen > 0 and 2 * jpegs > seen


def holds_jpegs(train_dir: Path, sample: int = 256) -> bool:
    """Most of the first `sample` files of the class folders are JPEGs."""
    return mostly_jpegs((p.name for f in sorted(train_dir.iterdir()) if f.is_dir() for p in f.iterdir()), sample)


def _decode(cfg: Config, accelerator: str, images: Sequence[str | Path] | None = None) -> str:
    """Where images are decoded. `images`: predict.py's inputs, which take the place of the training folder."""
    if cfg.decode == "cpu":
        return "cpu"
    if images is None and cfg.data != "folder":
        if cfg.decode == "gpu":
            raise ConfigError("decode", f"gpu decodes image files, which only --data folder reads, not {cfg.data}")
        return "cpu"
    if cfg.decode == "gpu" and accelerator != "cuda":
        raise ConfigError("decode", f"gpu needs a CUDA GPU, not {accelerator}; use cpu or auto")
    if cfg.decode == "gpu" and not torchcodec_available():
        raise ConfigError("decode", "gpu needs TorchCodec, which is not installed here; pip install torchcodec, or cpu")
    if cfg.decode == "gpu":
        return "gpu"
    if accelerator != "cuda" or not torchcodec_available():
        return "cpu"
    train = Path(cfg.data_dir) / "train"
    jpegs = mostly_jpegs(str(p) for p in images) if images is not None else train.is_dir() and holds_jpegs(train)
    return "gpu" if jpegs else "cpu"


def _accelerator(cfg: Config) -> str:
    cuda = torch.cuda.is_available()
    if cfg.accelerator == "auto":
        return "cuda" if cuda else "cpu"
    if cfg.accelerator in ("gpu", "cuda"):
        if not cuda:
            raise ConfigError(
                "accelerator", f"{cfg.accelerator} asked for, but no CUDA GPU is visible; use cpu or auto"
            )
        return "cuda"
    if cfg.accelerator == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("accelerator", "mps asked for, but this machine has no Apple GPU; use cpu or auto")
    return cfg.accelerator


def _local_devices(cfg: Config, accelerator: str) -> tuple[int | list[int] | str, int]:
    """Check the request against the machine before any process is spawned; return it and the count per node."""
    devices = parse_devices(cfg.devices)
    available = torch.cuda.device_count() if accelerator == "cuda" else (os.cpu_count() or 1)
    if accelerator == "mps":
        available = 1
    if devices == "auto":
        return devices, available if accelerator == "cuda" else 1
    if isinstance(devices, list):
        if accelerator != "cuda":
            raise ConfigError("devices", f"GPU ids {cfg.devices!r} need a CUDA GPU; on {accelerator} give a count")
        if max(devices) >= available:
            raise ConfigError("devices", f"GPU ids go from 0 to {available - 1} on this machine; got {cfg.devices!r}")
        return devices, len(devices)
    assert isinstance(devices, int)
    if devices > available:
        unit = "CUDA GPUs" if accelerator == "cuda" else f"{accelerator} devices (cores)"
        raise ConfigError("devices", f"{devices} asked for, but this machine has {available} {unit}")
    return devices, devices


def _precision(cfg: Config, accelerator: str) -> str:
    if cfg.precision == "16-mixed" and accelerator != "cuda":
        raise ConfigError("precision", f"16-mixed needs a CUDA GPU, not {accelerator}; use bf16-mixed or 32-true")
    if cfg.precision != "auto":
        return cfg.precision
    if accelerator != "cuda":
        return "32-true"  # CPU bf16 speed depends on the chip (AMX, AVX512-BF16): opt in with --precision bf16-mixed
    # bf16 has fp32's range, so no loss scaling; Ampere (sm80) and newer run it at full tensor-core speed.
    return "bf16-mixed" if torch.cuda.get_device_capability()[0] >= 8 else "16-mixed"


def resolve(cfg: Config, images: Sequence[str | Path] | None = None) -> Hardware:
    """`images`: the files predict.py labels; `--decode auto` then looks at them instead of the training folder."""
    accelerator = _accelerator(cfg)
    devices, local = _local_devices(cfg, accelerator)
    world_size = local * cfg.num_nodes
    if cfg.strategy == "fsdp" and accelerator != "cuda":
        raise ConfigError("strategy", f"fsdp needs CUDA GPUs, not {accelerator}; use auto or ddp")
    if cfg.auto_batch_size and world_size > 1:
        raise ConfigError("auto_batch_size", f"searches on one device, not {world_size}; use --devices 1")
    return Hardware(
        accelerator=accelerator,
        devices=devices,
        world_size=world_size,
        precision=_precision(cfg, accelerator),
        # Compiling costs ~1 min on GPU and pays back within an epoch; on CPU it rarely pays back, so opt-in there.
        compile=cfg.compile if cfg.compile is not None else accelerator == "cuda",
        # NHWC is what tensor cores want; on CPU it is neutral to slightly faster with oneDNN, so it follows the flag.
        channels_last=cfg.channels_last,
        # Pinned host memory makes the host-to-device copy asynchronous; pointless without a CUDA device.
        pin_memory=accelerator == "cuda",
        # One CPU per device stays with the training process; all the others decode and collate. No fixed cap: one
        # core decodes ~480 photo-sized JPEGs/s, and a GPU trains ResNet-50 at 5,000+ img/s (issue #11's H100 run:
        # 8 workers gave 0.59x synthetic speed, 15 gave 0.98x).
        num_workers=cfg.num_workers if cfg.num_workers is not None else max(0, cpus_per_device(local) - 1),
        # Fixed input shapes (drop_last, square images) let cuDNN autotune once; determinism forbids autotuning.
        cudnn_benchmark=accelerator == "cuda" and not cfg.deterministic,
        device_name=torch.cuda.get_device_name() if accelerator == "cuda" else accelerator,
        decode=_decode(cfg, accelerator, images),
    )


def apply_backend_flags(cfg: Config) -> None:
    # "high" lets fp32 matmuls and convolutions use TF32 tensor cores (Ampere+); "highest" keeps true fp32.
    torch.set_float32_matmul_precision("high" if cfg.tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = cfg.tf32
