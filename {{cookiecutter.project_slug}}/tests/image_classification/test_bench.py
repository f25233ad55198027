"""bench.py and train.py --profile on CPU, in a configuration small enough for a test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, wait_until
from lightning_gpu_engine import testing

import bench
import train
from {{ cookiecutter.package_name }}.tasks.image_classification.bench import (
    ImageSpec,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.sources import (
    SHAPES,
    write_photos,
)

TINY = ["--device=cpu", "--model=resnet18", "--image-size=16", "--batch-size=8", "--warmup=1", "--steps=2"]


def test_bench_measures_every_cpu_setting_the_plain_loop_real_jpegs_and_the_loaders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench.main([*TINY, "--rounds=2", f"--json={tmp_path / 'bench.json'}"])
    results = json.loads((tmp_path / "bench.json").read_text())
    names = [row["name"] for row in results["settings"]]
    assert names == ["fp32", "fp32+cl", "bf16", "bf16+cl"]
    [default] = [row["name"] for row in results["settings"] if row["default"]]  # fp32+cl, unless baked otherwise
    for row in [*results["settings"], results["plain"]]:
        assert row["samples_per_s"] > 0 and row["step_ms"] > 0 and row["startup_s"] >= 0, row
        assert row["peak_memory_gib"] is None and row["mfu"] is None, "no per-run memory peak nor MFU on a CPU"
    assert results["plain"]["name"] == f"plain PyTorch, {default}" and results["lightning_over_plain"] > 0
    rounds = results["lightning_over_plain_rounds"]
    assert len(rounds) == 2 and results["lightning_over_plain"] == pytest.approx(sum(rounds) / 2)  # the median of 2
    assert results["lightning_over_plain_noisy"] == (abs(rounds[0] - rounds[1]) > 0.05 * sum(rounds) / 2)
    assert results["flops_per_batch"] > 0
    [folder] = results["folder"]  # no CUDA: the workers decode
    assert folder["name"] == f"{default}, folder JPEGs, cpu decode" and folder["samples_per_s"] > 0
    loaders = {(row["data"], row["workers"], row["pin_memory"]) for row in results["loader"]}
    assert {("synthetic", 0, False), ("folder cpu-decode", 0, False)} <= loaders
    assert all(row["samples_per_s"] > 0 for row in results["loader"]) and results["finished"]
    predict = [(row["name"], row["samples_per_s"] > 0) for row in results["predict"]]
    assert predict == [(f"predict.py path, {default}", True), (f"plain inference_mode loop, {default}", True)]
    assert results["torch"] and results["lightning"] and results["command"].startswith("python bench.py --device=cpu")
    printed = capsys.readouterr().out
    assert "Lightning / plain PyTorch throughput:" in printed
    assert "Lightning / plain PyTorch inference throughput:" in printed
    expected = [f"{default} (default)", f"plain PyTorch, {default}", "loader folder cpu-decode", "x synthetic"]
    for name in [*names, *expected]:
        assert name in printed


def test_only_runs_the_named_settings(tmp_path: Path) -> None:
    default = bench.default_setting(
        ImageSpec(device="cpu", model="resnet18", image_size=16, batch_size=8, warmup=1, steps=2)
    ).name
    other = "bf16" if default != "bf16" else "fp32"
    results = bench.main([*TINY, f"--only={other}", f"--json={tmp_path / 'bench.json'}"])
    assert [row["name"] for row in results["settings"]] == [other]
    assert results["plain"] is None and results["loader"] == [] == results["folder"], "only what was asked for"


def test_an_unknown_setting_fails_in_one_line_with_the_valid_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.main([*TINY, "--only=fp64"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --only: 'fp64' is not one of: fp32, fp32+cl, bf16, bf16+cl, folder, loader, predict"]


def test_a_benchmark_killed_part_way_keeps_every_row_it_finished(tmp_path: Path) -> None:
    """Each row reaches the JSON as soon as it is measured, by an atomic rename: SIGKILL to the process group (an
    OOM kill, a crash in a late stage) leaves a valid file with the rows done so far."""
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(ROOT / "bench.py"), *TINY, f"--json={out}"]
    process = testing.popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, start_new_session=True)
    try:
        wait_until(lambda: out.exists() and json.loads(out.read_text())["settings"], process, "a measured row")
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        stdout, _ = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, "killed before the end, or the test shows nothing"
    results = json.loads(out.read_text())
    assert not results["finished"] and b"results:" not in stdout
    assert [row["name"] for row in results["settings"]][:1] == ["fp32"], "the first setting, measured and kept"
    assert all(row["samples_per_s"] > 0 for row in results["settings"]) and results["loader"] == []


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


@pytest.mark.parametrize("distinct", [4, 64])
def test_the_photo_writer_gives_val_one_image_of_each_class_that_train_has(tmp_path: Path, distinct: int) -> None:
    """With fewer distinct photos than classes, train/ has fewer classes, and val/ must not link to missing ones."""
    write_photos(tmp_path, samples=16, distinct=distinct, size=(30, 40))
    train = {folder.name: sorted(folder.iterdir()) for folder in (tmp_path / "train").iterdir()}
    val = {folder.name: sorted(folder.iterdir()) for folder in (tmp_path / "val").iterdir()}
    assert sorted(train) == sorted(val) == sorted(SHAPES[: min(distinct, len(SHAPES))])
    assert sum(map(len, train.values())) == 16
    for name, [image] in val.items():
        first = min(train[name], key=lambda path: int(path.stem))
        assert image.read_bytes() == first.read_bytes() and image.read_bytes()[:2] == b"\xff\xd8"
