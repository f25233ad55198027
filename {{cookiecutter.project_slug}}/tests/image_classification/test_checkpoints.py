"""A checkpoint of another image network is refused in one line, naming the flag that differs (the engine's own
refusals, resume and saves are lightning-gpu-engine's tests/test_checkpoints.py's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import edited

import train

from .conftest import TINY


@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A last.ckpt as train.py writes it: one epoch of resnet18 on 6 classes at 16 px."""
    out = tmp_path_factory.mktemp("real") / "run"
    train.main([*TINY, "--max-epochs=1", f"--output-dir={out}"])
    return out / "checkpoints" / "last.ckpt"


# Each case: how to make the file from a real checkpoint, the flags of the resuming run, what the one line says.
CASES: dict[str, tuple[Callable[[Path, Path], Path], list[str], str]] = {
    "another architecture": (lambda real, tmp: real, ["--model=resnet34"], "trained with resnet18, not resnet34"),
    "another class count": (
        lambda real, tmp: edited(
            real,
            tmp,
            lambda c: c["state_dict"].update({k: v[:4] for k, v in c["state_dict"].items() if k.startswith("net.fc.")}),
        ),
        [],
        "is for another network: weights differ (net.fc.weight: (4, 512) vs (6, 512))",
    ),
    "another image size": (lambda real, tmp: real, ["--image-size=96"], "trained with 16, not 96"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_checkpoint_of_another_image_network_is_refused_in_one_line_naming_the_flag(
    case: str, real_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, flags, expected = CASES[case]
    path = make(real_checkpoint, tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, f"--output-dir={tmp_path / 'run'}", f"--resume={path}", *flags])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    blamed = flags[0].split("=")[0] if flags else "--resume"  # the flag that differs from the checkpoint, if any
    assert len(lines) == 1 and lines[0].startswith(f"error: {blamed}: "), lines
    assert expected in lines[0]
    assert not (tmp_path / "run").exists()
