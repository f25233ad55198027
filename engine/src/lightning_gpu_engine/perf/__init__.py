"""Speed: the hardware's resolved defaults, compiling the networks, throughput and MFU, and the speed promises a task
can break.

Its `__all__`: the names the front door re-exports from it. Most need torch, so each is imported when first used,
from where the TYPE_CHECKING block below imports it.

Layer 2: imports `config` and `tools`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_gpu_engine.tools.first_use import first_use

if TYPE_CHECKING:  # what type checkers see, and where each name is imported from on first use
    from lightning_gpu_engine.perf.hardware import Hardware, apply_backend_flags, cpus_per_device
    from lightning_gpu_engine.perf.hardware import resolve as resolve_hardware
    from lightning_gpu_engine.perf.monitors import HALF
    from lightning_gpu_engine.perf.networks import batch_flops, check_module
    from lightning_gpu_engine.perf.peaks import HALF_PRECISIONS, device_peak, peak_flops
    from lightning_gpu_engine.perf.promises import RunPromises

__all__ = [
    "HALF",
    "HALF_PRECISIONS",
    "Hardware",
    "RunPromises",
    "apply_backend_flags",
    "batch_flops",
    "check_module",
    "cpus_per_device",
    "device_peak",
    "peak_flops",
    "resolve_hardware",
]
__getattr__ = first_use(__name__)
