"""--ema means the average everywhere: generate.py and export.py load the average that the checkpoint holds, never the
raw weights Lightning keeps beside it for a resume."""

from __future__ import annotations

from pathlib import Path

import torch
from conftest import run_script, run_train
from lightning_gpu_engine import read_checkpoint

from {{ cookiecutter.package_name }}.tasks.language_model.sampling import (
    load_checkpoint,
    load_pretrained,
)

from .conftest import TINY


def test_generate_and_export_use_the_average_the_checkpoint_holds(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_train(*TINY, "--max-epochs=1", "--ema", "--ema-decay=0.5", f"--output-dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    checkpoint = out / "checkpoints" / "last.ckpt"
    saved = read_checkpoint(checkpoint)
    average, raw = (
        {k.removeprefix("net."): v for k, v in saved[key].items()} for key in ("state_dict", "current_model_state")
    )

    generating, _ = load_checkpoint(str(checkpoint))  # generate.py's loading
    folder = tmp_path / "exported"
    done = run_script("export.py", f"--checkpoint={checkpoint}", f"--output={folder}")
    assert done.returncode == 0, done.stderr[-3000:]
    exported, _ = load_pretrained(str(folder), None)  # generate.py --pretrained's: the exported weights, read back
    vocabulary = exported.vocab_size  # the rows past it pad the embedding: never a token, so never exported
    for net in (generating, exported):
        weights = net.state_dict()
        weights["wte.weight"] = weights["wte.weight"][:vocabulary]
        assert all(torch.equal(w, average[k][: w.size(0)]) for k, w in weights.items())
        assert not all(torch.equal(w, raw[k][: w.size(0)]) for k, w in weights.items())
