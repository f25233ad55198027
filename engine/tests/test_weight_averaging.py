"""--ema, and Lightning's EMAWeightAveraging brought by a module: the final test scores the average that the best
checkpoint holds, a tool reads that average, and a resume continues both the average and the raw weights bit for
bit."""

from __future__ import annotations

import csv
import signal
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning as L
import pytest
import torch

from lightning_gpu_engine import check_checkpoint, parse_run, read_checkpoint, resolve_hardware

from .conftest import TOY, run_toy, signalling_task

# 64 samples in batches of 8: 8 steps an epoch, 16 in all; the average keeps half of itself each step
ARGS = [*TOY, "--samples=64", "--max-epochs=2"]
EMA = ["--ema", "--ema-decay=0.5"]
# What Lightning says where the test restores the raw weights, or finds only the average there, left unfiltered
RAW_RESTORED = ("current_model_state", "not created with WeightAveraging", "outside the 'fit' stage")

# my_task.py whose module brings its own averaging (configure_callbacks), one instance for the fit and the test
BRINGS_ITS_OWN = """
import importlib.util, sys
from dataclasses import replace
from lightning.pytorch.callbacks import EMAWeightAveraging
from lightning_gpu_engine import run_hparams, train

spec = importlib.util.spec_from_file_location("my_task", {program!r})
task = importlib.util.module_from_spec(spec)
sys.modules["my_task"] = task
spec.loader.exec_module(task)
AVERAGING = EMAWeightAveraging(decay=0.5)

class Averaged(task.Regressor):
    def configure_callbacks(self):
        return [AVERAGING]

build = lambda cfg, opts, hw, data: Averaged(opts.features, opts.hidden, **run_hparams(cfg, hw))
train(replace(task.TASK, build_model=build), sys.argv[1:])
"""


def final_test_loss(output_dir: Path) -> float:
    with open(output_dir / "logs" / "version_0" / "metrics.csv", newline="") as file:
        return next(float(row["test/loss"]) for row in csv.DictReader(file) if row.get("test/loss"))


def score(toy: ModuleType, weights: dict[str, torch.Tensor], output_dir: Path) -> float:
    """test/loss of `weights` in a Trainer of their own, with no averaging callback to swap anything."""
    cfg, opts = parse_run([*ARGS, f"--output-dir={output_dir}"], toy.TASK)
    hw = resolve_hardware(cfg)
    data = toy.TASK.build_data(cfg, opts, hw)
    model = toy.TASK.build(cfg, opts, hw, data)
    model.load_state_dict(weights)
    plain = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    return float(plain.test(model, datamodule=data, verbose=False)[0]["test/loss"])


@pytest.mark.parametrize("averaging", ["--ema", "the module's own"])
def test_the_final_test_scores_the_average_that_the_best_checkpoint_holds_and_a_tool_reads(
    averaging: str, my_task: Path, toy: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "averaged"
    if averaging == "--ema":
        done = run_toy(my_task, *ARGS, *EMA, f"--output-dir={out}")
    else:
        program = tmp_path / "brings_its_own.py"
        program.write_text(BRINGS_ITS_OWN.format(program=str(my_task)))
        done = run_toy(program, *ARGS, f"--output-dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert not [words for words in RAW_RESTORED if words in said], said[-3000:]

    [best] = (out / "checkpoints").glob("best-*.ckpt")
    saved = read_checkpoint(best)
    average, raw = (score(toy, saved[key], tmp_path) for key in ("state_dict", "current_model_state"))
    assert abs(average - raw) > 1e-4, f"the average ({average}) and the raw weights ({raw}) score apart"
    assert final_test_loss(out) == pytest.approx(average, rel=1e-6, abs=0)

    used = check_checkpoint(best, training=False)  # what predict.py, export.py and generate.py load
    assert "current_model_state" not in used and "averaging_state" not in used
    assert all(torch.equal(used["state_dict"][k], v) for k, v in saved["state_dict"].items())
    if averaging == "--ema":  # the same training without it: the raw weights, scored apart
        plain = run_toy(my_task, *ARGS, f"--output-dir={tmp_path / 'plain'}")
        assert plain.returncode == 0, plain.stderr[-3000:]
        assert final_test_loss(tmp_path / "plain") != final_test_loss(out)


def averaging_of(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Both copies of the weights, the average's count of updates, and the callback's last updated step."""
    own = next(v for k, v in checkpoint["callbacks"].items() if "EMAWeightAveraging" in k)
    keys = ("state_dict", "current_model_state", "averaging_state")
    return {**{f"{key}.{name}": t for key in keys for name, t in checkpoint[key].items()}, "callback": own}


def test_a_resume_after_a_stop_mid_epoch_continues_the_average_and_the_raw_weights_bit_for_bit(
    my_task: Path, tmp_path: Path
) -> None:
    whole = run_toy(my_task, *ARGS, *EMA, f"--output-dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "stopped"
    script = signalling_task(
        tmp_path / "stops.py", my_task, "on_train_batch_end(self, trainer, *args)", "trainer.global_step == 11"
    )
    stopped = run_toy(script, *ARGS, *EMA, f"--output-dir={out}", new_session=True)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    # StopOnSignal looked before the signal at step 11's end: it stops at the next
    assert read_checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 12
    resumed = run_toy(my_task, *ARGS, *EMA, f"--output-dir={out}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    want, got = (averaging_of(read_checkpoint(o / "checkpoints" / "last.ckpt")) for o in (tmp_path / "whole", out))
    assert want.keys() == got.keys() and want["callback"] == got["callback"] == {"latest_update_step": 16}
    differ = [k for k in want if k != "callback" and not torch.equal(want[k], got[k])]
    assert not differ, f"the resumed run's differ: {differ}"
    assert final_test_loss(out) == final_test_loss(tmp_path / "whole")
