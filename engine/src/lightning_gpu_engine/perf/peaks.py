"""Dense peak FLOP/s per GPU, the denominator of MFU: a table of our own, from NVIDIA's datasheets.

Datasheets quote tensor-core peaks "with sparsity", twice the dense rate that training can reach; every figure here
is dense. Lightning's own table (`get_available_flops`, 2.6) has no plain "NVIDIA H200" and takes sparse figures for
some GPUs (Lightning issues #20660, #21677), which halves the MFU it reports for them.
"""

from __future__ import annotations

import re

import torch

# (pattern on torch.cuda.get_device_name(), name shown, TFLOP/s for bf16/fp16, tf32, fp32), first match wins
PEAKS: list[tuple[str, str, float, float, float]] = [
    (r"H100.*NVL", "H100 NVL", 835.5, 417.5, 60.0),
    (r"H100.*PCIe", "H100 PCIe", 756.5, 378.0, 51.0),
    (r"H100", "H100 SXM", 989.4, 494.7, 66.9),
    (r"H200.*NVL", "H200 NVL", 835.5, 417.5, 60.0),
    (r"H200", "H200 SXM", 989.4, 494.7, 66.9),
    (r"GH200", "GH200", 989.4, 494.7, 66.9),
    (r"A100", "A100", 312.0, 156.0, 19.5),
    (r"L40S", "L40S", 362.1, 183.0, 91.6),
    (r"L40\b", "L40", 181.0, 90.5, 90.5),
    (r"\bL4\b", "L4", 121.0, 60.0, 30.3),
    (r"\bA10\b", "A10", 125.0, 62.5, 31.2),
    (r"RTX 4090", "RTX 4090", 165.2, 82.6, 82.6),
    (r"RTX 3090", "RTX 3090", 71.0, 35.6, 35.6),
    (r"V100.*PCIe", "V100 PCIe", 112.0, 14.0, 14.0),  # no bf16 or tf32: fp16 tensor cores, fp32 otherwise
    (r"V100", "V100 SXM2", 125.0, 15.7, 15.7),
    (r"\bT4\b", "T4", 65.0, 8.1, 8.1),
]
HALF_PRECISIONS = ("bf16-mixed", "bf16-true", "16-mixed", "16-true")


def peak_flops(device_name: str, precision: str, tf32: bool) -> tuple[float, str] | None:
    """One device's dense peak for the run's matmuls, and what it is ("H100 SXM dense bf16/fp16"); None: unknown."""
    for pattern, name, half, tensor_float, single in PEAKS:
        if re.search(pattern, device_name):
            if precision in HALF_PRECISIONS:
                return half * 1e12, f"{name} dense bf16/fp16, {half:g} TFLOP/s"
            if tf32:
                return tensor_float * 1e12, f"{name} dense tf32, {tensor_float:g} TFLOP/s"
            return single * 1e12, f"{name} fp32, {single:g} TFLOP/s"
    return None


def device_peak(device: torch.device, precision: str) -> tuple[float, str] | None:
    """`peak_flops` of a run's device: CUDA only; tf32 as --tf32 left torch's matmul precision."""
    if device.type != "cuda":
        return None
    tf32 = torch.get_float32_matmul_precision() != "highest"
    return peak_flops(torch.cuda.get_device_name(device), precision, tf32)
