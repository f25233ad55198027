"""bench.py and train.py --profile on CPU, in a configuration small enough for a test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench
import train

TINY = ["--device=cpu", "--model=resnet18", "--image-size=16", "--batch-size=8", "--warmup=1", "--steps=2"]


def test_bench_measures_every_cpu_setting_the_plain_loop_and_the_loaders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench.main([*TINY, f"--json={tmp_path / 'bench.json'}"])
    results = json.loads((tmp_path / "bench.json").read_text())
    names = [row["name"] for row in results["settings"]]
    assert names == ["fp32", "fp32+cl", "bf16", "bf16+cl"]
    [default] = [row["name"] for row in results["settings"] if row["default"]]  # fp32+cl, unless baked otherwise
    for row in [*results["settings"], results["plain"]]:
        assert row["images_per_s"] > 0 and row["step_ms"] > 0 and row["startup_s"] >= 0, row
        assert row["peak_memory_gib"] is None and row["mfu"] is None, "no per-run memory peak nor MFU on a CPU"
    assert results["plain"]["name"] == f"plain PyTorch, {default}" and results["lightning_over_plain"] > 0
    assert results["flops_per_batch"] > 0
    loaders = {(row["data"], row["workers"], row["pin_memory"]) for row in results["loader"]}
    assert {("synthetic", 0, False), ("folder", 0, False)} <= loaders
    assert all(row["samples_per_s"] > 0 for row in results["loader"])
    assert results["torch"] and results["lightning"] and results["command"].startswith("python bench.py --device=cpu")
    printed = capsys.readouterr().out
    assert "Lightning / plain PyTorch throughput:" in printed
    for name in [*names, f"{default} (default)", f"plain PyTorch, {default}", "loader folder"]:
        assert name in printed


def test_only_runs_the_named_settings(tmp_path: Path) -> None:
    default = bench.default_setting(bench.Spec("cpu", "resnet18", 16, 8, warmup=1, steps=2)).name
    other = "bf16" if default != "bf16" else "fp32"
    results = bench.main([*TINY, f"--only={other}", f"--json={tmp_path / 'bench.json'}"])
    assert [row["name"] for row in results["settings"]] == [other]
    assert results["plain"] is None and results["loader"] == [], "the default setting and the loaders were not asked"


def test_an_unknown_setting_fails_in_one_line_with_the_valid_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.main([*TINY, "--only=fp64"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --only: 'fp64' is not one of: fp32, fp32+cl, bf16, bf16+cl, loader"]


def test_profile_writes_a_trace_and_a_kernel_table(tiny_args: list[str], tmp_path: Path) -> None:
    train.main([*tiny_args, "--profile"])
    trace = json.loads((tmp_path / "run" / "profile" / "trace.json").read_text())
    assert any(event.get("name", "").startswith("aten::convolution") for event in trace["traceEvents"])
    table = (tmp_path / "run" / "profile" / "kernels.txt").read_text()
    assert "Self CPU" in table and "aten::" in table
    assert not (tmp_path / "run" / "checkpoints").exists(), "profiling trains a few steps, it saves nothing"


def test_profile_refuses_fast_dev_run_which_has_too_few_steps(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--profile", "--fast-dev-run"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: --profile: needs a dozen training steps")
