"""The README's promise: a default bake, trained with the CPU quickstart config, ends above 90% val accuracy."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.minutes(2.3)
def test_readme_quickstart_trains_above_90_percent(tmp_path: Path, time_limit: float, engine_python: Path) -> None:
    project = Path(cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(tmp_path)))
    env = {**os.environ, "PYTHONPATH": str(project / "src")}
    result = subprocess.run(
        [engine_python, "train.py", "--config", "configs/cpu-quickstart.yaml", "--output-dir", str(tmp_path / "out")],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=time_limit,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = re.search(r"best val/acc=([\d.]+)\s+test/acc=([\d.]+)", result.stdout)
    assert summary, result.stdout[-3000:]
    val_acc, test_acc = map(float, summary.groups())
    print(f"quickstart: val/acc={val_acc:.4f} test/acc={test_acc:.4f}")
    assert val_acc >= 0.90 and test_acc >= 0.85
