"""bench.py for the language model, on the CPU: each row saved with its tokens/s, and the ratio to the plain loop."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_script


def test_bench_saves_each_row_and_times_lightning_against_the_plain_loop(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["--device=cpu", "--only=fp32,fp32+fsdp+ac", "--rounds=2", "--warmup=1", "--steps=5", f"--json={out}"]
    result = run_script("bench.py", *args, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["finished"] and saved["command"].startswith("python bench.py --device=cpu")
    assert [row["name"] for row in saved["settings"]] == ["fp32", "fp32+fsdp+ac"]
    for row in [*saved["settings"], saved["plain"]]:
        assert row["tokens_per_s"] > 0 and len(row["windows"]) == 5 and row["mfu"] is None  # no peak for a CPU
    assert saved["plain"]["name"] == "plain PyTorch, fp32"
    assert len(saved["lightning_over_plain_rounds"]) == 2 and saved["lightning_over_plain"] > 0
    assert "Lightning / plain PyTorch throughput:" in result.stdout and "tokens/s" in result.stdout
    bad = run_script("bench.py", "--device=cpu", "--only=fp64")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: --only: 'fp64' is not one of: fp32")
