"""Every performance switch, resolved once at start-up against the machine we actually run on.

Each choice says why it is on and when it is off. `resolve` only decides; `apply_backend_flags` is the one place that
changes global torch state.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError, parse_devices, usable_cpus
from lightning_gpu_engine.perf.compile_artifacts import SaveCompileCache, use
from lightning_gpu_engine.perf.compile_cache import cache_dir


@dataclass(frozen=True)
class Hardware:
    accelerator: str  # "cuda", "cpu" or "mps": what Lightning's Trainer gets
    devices: int | list[int] | str
    world_size: int  # processes in the whole job
    precision: str
    compile: bool
    channels_last: bool | None  # None: the task does not declare the layout (Task.channels_last), so none is printed
    pin_memory: bool
    num_workers: int
    cudnn_benchmark: bool
    device_name: str
    # the task's own device choices (the image task's --decode), printed with the rest
    choices: dict[str, str] = field(default_factory=dict)
    # why nothing is compiled for this task, whatever was asked (Task.compile_off, or a module without networks)
    compile_off: str | None = None

    def summary(self) -> str:
        compiled = f"off ({self.compile_off})" if self.compile_off else self.compile
        return (
            f"hardware: {self.device_name} x{self.world_size} | precision={self.precision} compile={compiled} "
            + ("" if self.channels_last is None else f"channels_last={self.channels_last} ")
            + f"pin_memory={self.pin_memory} workers/device={self.num_workers} "
            + "".join(f"{key}={value} " for key, value in self.choices.items())
            + f"cudnn.benchmark={self.cudnn_benchmark}"
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
    if accelerator == "cpu" and native_bf16():
        # bench.py on a Xeon with AMX, CPU time: ResNets 1.10-2.04x fp32, an MLP of 512-wide layers 1.35x (a few tiny
        # matmuls, 0.88x: pass --precision 32-true); docs/benchmarks/2026-11-24-cpu-defaults-intel-xeon-amx.txt
        return "bf16-mixed"
    if accelerator != "cuda":
        return "32-true"  # no bf16 units: emulated bf16 is slower than fp32
    # bf16 has fp32's range, so no loss scaling; Ampere (sm80) and newer run it at full tensor-core speed.
    return "bf16-mixed" if torch.cuda.get_device_capability()[0] >= 8 else "16-mixed"


def native_bf16() -> bool:
    """A CPU with bf16 matrix units (AMX) or instructions (AVX512-BF16), which oneDNN uses for bf16 convolutions and
    matmuls; without them bf16 is emulated, slower than fp32."""
    try:
        return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())
    except AttributeError:  # a torch without these probes: assume none
        return False


def _channels_last(cfg: Config, accelerator: str, precision: str) -> bool:
    if cfg.channels_last is not None:
        return cfg.channels_last
    # NHWC is what tensor cores want. On CPUs, bench.py measured it slower than NCHW in fp32 (0.83-0.96x), and faster
    # in bf16 on AMX (1.04-1.24x over bf16 NCHW): so on a CPU it follows native bf16.
    return accelerator == "cuda" or (accelerator == "cpu" and precision.startswith("bf16") and native_bf16())


def resolve(cfg: Config, fsdp2: bool = False, channels_last: bool = False, compile_off: str | None = None) -> Hardware:
    """`fsdp2`: the task shards with FSDP2 (`Task.fsdp2`), which runs on CPUs too and has two sharding modes.
    `channels_last`: the task declares the layout (`Task.channels_last`); otherwise it is neither chosen nor printed.
    `compile_off`: why the task is never compiled (`Task.compile_off`)."""
    accelerator = _accelerator(cfg)
    devices, local = _local_devices(cfg, accelerator)
    world_size = local * cfg.num_nodes
    if cfg.strategy == "fsdp" and accelerator != "cuda" and not fsdp2:
        raise ConfigError("strategy", f"fsdp needs CUDA GPUs, not {accelerator}; use auto or ddp")
    if cfg.strategy == "fsdp" and fsdp2 and cfg.fsdp_sharding not in ("FULL_SHARD", "SHARD_GRAD_OP"):
        raise ConfigError("fsdp_sharding", f"FSDP2 shards FULL_SHARD or SHARD_GRAD_OP, not {cfg.fsdp_sharding}")
    if cfg.auto_batch_size and world_size > 1:
        raise ConfigError("auto_batch_size", f"searches on one device, not {world_size}; use --devices 1")
    precision = _precision(cfg, accelerator)
    return Hardware(
        accelerator=accelerator,
        devices=devices,
        world_size=world_size,
        precision=precision,
        # Compiling costs ~1 min on GPU and pays back within an epoch; on CPU it rarely pays back, so opt-in there.
        compile=not compile_off and (cfg.compile if cfg.compile is not None else accelerator == "cuda"),
        channels_last=_channels_last(cfg, accelerator, precision) if channels_last else None,
        # Pinned host memory makes the host-to-device copy asynchronous; pointless without a CUDA device.
        pin_memory=accelerator == "cuda",
        # One CPU per device stays with the training process; all the others decode and collate. No fixed cap: one
        # core decodes ~480 photo-sized JPEGs/s, and a GPU trains ResNet-50 at 5,000+ img/s (issue #11's H100 run:
        # 8 workers gave 0.59x synthetic speed, 15 gave 0.98x).
        num_workers=cfg.num_workers if cfg.num_workers is not None else max(0, cpus_per_device(local) - 1),
        # Fixed input shapes (drop_last, square images) let cuDNN autotune once; determinism forbids autotuning.
        cudnn_benchmark=accelerator == "cuda" and not cfg.deterministic,
        device_name=torch.cuda.get_device_name() if accelerator == "cuda" else accelerator,
        compile_off=compile_off,
    )


def apply_backend_flags(cfg: Config) -> None:
    # "high" lets fp32 matmuls and convolutions use TF32 tensor cores (Ampere+); "highest" keeps true fp32.
    torch.set_float32_matmul_precision("high" if cfg.tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = cfg.tf32


def use_compile_cache(cfg: Config, hw: Hardware) -> SaveCompileCache | None:
    """Before anything is compiled: inductor's caches in the run's --compile-cache folder, and the artifacts saved
    there loaded. Returns the callback that saves them again (its `found`: what was there); None where it is off."""
    # Compiling costs every start again (40 s for ResNet-50 on an H100) unless its cache outlives the process and the
    # node: torch's own is in node-local /tmp, empty where a requeued job lands. Off without --compile, and with
    # --compile-cache none (torch's own cache, as it is set up).
    directory = cache_dir(cfg)
    if not hw.compile or directory is None:
        return None
    return use(directory, hw.device_name)
