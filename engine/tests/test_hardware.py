"""Loader workers sized to the CPUs this process may use, as the toy task's flags resolve them. Where the image task
decodes its images is tests/image_classification/test_hardware.py's."""

from __future__ import annotations

from types import ModuleType

import pytest

from lightning_gpu_engine import parse_run
from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.perf import hardware

CPU = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto"]  # pinned: a bake may default to fsdp or fp16


def resolved(toy: ModuleType, argv: list[str]) -> hardware.Hardware:
    cfg: Config = parse_run(argv, toy.TASK)[0]
    return hardware.resolve(cfg)


@pytest.fixture
def sixteen_cpus(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    for name in ("SLURM_CPUS_PER_TASK", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_default_workers_are_all_cpus_but_one_with_no_cap_of_eight(
    toy: ModuleType, sixteen_cpus: pytest.MonkeyPatch
) -> None:
    hw = resolved(toy, CPU)
    assert hw.num_workers == 15 and "workers/device=15" in hw.summary()
    assert resolved(toy, [*CPU, "--num-workers=3"]).num_workers == 3


def test_workers_follow_the_affinity_mask_not_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)  # taskset -c 0-3
    monkeypatch.setattr(hardware.os, "cpu_count", lambda: 64)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert hardware.cpus_per_device(1) == 4 and hardware.cpus_per_device(2) == 2


def test_slurm_cpus_per_task_bound_each_task_and_are_shared_only_by_its_own_devices(
    toy: ModuleType, sixteen_cpus: pytest.MonkeyPatch
) -> None:
    sixteen_cpus.setenv("SLURM_CPUS_PER_TASK", "6")
    sixteen_cpus.setenv("SLURM_NTASKS_PER_NODE", "4")  # srun: one task per GPU, each sees the node's mask
    assert hardware.cpus_per_device(4) == 6
    sixteen_cpus.setenv("SLURM_NTASKS_PER_NODE", "1(x2)")  # one task per node drives 2 devices itself
    assert hardware.cpus_per_device(2) == 3
    assert resolved(toy, CPU).num_workers == 5
