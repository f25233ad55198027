"""`--optimizer muon`: Muon trains the hidden matrices and AdamW the rest, through the command line of a team's task,
and a stop then `--resume last` continues both exactly where they were."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from lightning_gpu_engine import train

from .conftest import TOY, run_toy, signalling_task

# the guide's task: Linear(8, 64), Linear(64, 64), Linear(64, 1). 64 samples in batches of 8: 8 steps an epoch.
MUON = [*TOY, "--samples=64", "--max-epochs=2", "--optimizer=muon", "--muon-lr=0.03", "--lr=0.004"]


def last(run: Path) -> dict[str, Any]:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def straight(my_task: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("muon") / "run"
    done = run_toy(my_task, *MUON, f"--output-dir={run}")
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def test_muon_takes_the_hidden_matrices_and_adamw_the_head_and_biases(straight: Path) -> None:
    saved = last(straight)["optimizer_states"][0]
    muon = [g for g in saved["param_groups"] if "ns_steps" in g]
    adamw = [g for g in saved["param_groups"] if "betas" in g]
    assert len(muon) + len(adamw) == len(saved["param_groups"])
    state = saved["state"]
    shapes = sorted(tuple(state[i]["momentum_buffer"].shape) for g in muon for i in g["params"])
    assert shapes == [(64, 8), (64, 64)], "the two hidden matrices; the 1 x 64 output layer keeps AdamW"
    rest = sorted(tuple(state[i]["exp_avg"].shape) for g in adamw for i in g["params"])
    assert rest == [(1,), (1, 64), (64,), (64,)]
    assert {g["initial_lr"] for g in muon} == {0.03} and {g["initial_lr"] for g in adamw} == {0.004}
    assert {g["weight_decay"] for g in muon} == {0.05}, "the engine's --weight-decay, decoupled as AdamW's"


def test_a_sigterm_then_resume_last_ends_as_the_uninterrupted_run(
    my_task: Path, straight: Path, tmp_path: Path
) -> None:
    hook = "on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx)"
    script = signalling_task(tmp_path / "signals_itself.py", my_task, hook, "trainer.global_step == 5")
    run = tmp_path / "run"
    stopped = run_toy(script, *MUON, f"--output-dir={run}", new_session=True)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert 5 <= last(run)["global_step"] < 8, "stopped inside the first epoch"
    resumed = run_toy(my_task, *MUON, f"--output-dir={run}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected, got = last(straight), last(run)
    assert got["global_step"] == expected["global_step"] == 16
    for name, weight in expected["state_dict"].items():
        assert torch.equal(got["state_dict"][name], weight), name
    for i, state in expected["optimizer_states"][0]["state"].items():
        for key, value in state.items():
            assert torch.equal(got["optimizer_states"][0]["state"][i][key], value), (i, key)


def test_a_changed_muon_lr_is_honoured_on_resume_and_a_changed_optimizer_refused(
    my_task: Path, straight: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes((straight / "checkpoints" / "last.ckpt").read_bytes())
    longer = [arg for arg in MUON if not arg.startswith(("--max-epochs", "--muon-lr"))] + ["--max-epochs=3"]
    switched = run_toy(my_task, *longer, "--optimizer=adamw", f"--output-dir={run}", "--resume=last")
    assert switched.returncode == 2 and "Traceback" not in switched.stderr
    assert (
        switched.stderr.strip().splitlines()[-1].startswith("error: --optimizer: the checkpoint was trained with muon")
    )
    honoured = run_toy(my_task, *longer, "--muon-lr=0.06", f"--output-dir={run}", "--resume=last")
    assert honoured.returncode == 0, honoured.stderr[-3000:]
    assert "resume: --muon-lr 0.06 instead of the checkpoint's 0.03" in honoured.stdout
    groups = last(run)["optimizer_states"][0]["param_groups"]
    assert {g["initial_lr"] for g in groups if "ns_steps" in g} == {0.06}
    assert {g["initial_lr"] for g in groups if "betas" in g} == {0.004}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy=fsdp"], "--optimizer: muon orthogonalizes whole matrices, which FSDP splits across devices"),
        (["--muon-lr=0"], "--muon-lr: must be positive, got 0.0"),
        (["--optimizer=lion"], "--optimizer: 'lion' is not one of: adamw, muon"),
    ],
)
def test_bad_muon_options_are_refused_in_one_line(my_task: Path, tmp_path: Path, args: list[str], message: str) -> None:
    refused = run_toy(my_task, *MUON, *args, f"--output-dir={tmp_path / 'run'}")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(f"error: {message}")
    assert not (tmp_path / "run").exists()


# a team's module that chose its optimizer itself: --optimizer muon would be ignored in silence
OWN_OPTIMIZER = """
import dataclasses, torch
from my_task import TASK, Regressor
from lightning_gpu_engine import run_hparams, train

class SGDRegressor(Regressor):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

train(dataclasses.replace(TASK, build_model=lambda c, o, h, d: SGDRegressor(o.features, o.hidden, **run_hparams(c, h))))
"""


def test_muon_for_a_module_with_its_own_optimizer_is_refused(my_task: Path, tmp_path: Path) -> None:
    script = my_task.parent / "own_optimizer.py"
    script.write_text(OWN_OPTIMIZER)
    refused = run_toy(script, *MUON, f"--output-dir={tmp_path / 'run'}")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "error: --optimizer: muon is EngineModule's optimizer, and SGDRegressor builds its own; use adamw"
    ]
    assert not (tmp_path / "run").exists()


def test_a_muon_rate_without_muon_is_refused_in_one_line_as_other_options_that_do_not_apply(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Accepted without a word, it would leave the user believing Muon trained at that rate."""
    with pytest.raises(SystemExit) as exit_info:
        train(toy.TASK, [*TOY, "--muon-lr=0.05", f"--output-dir={tmp_path / 'run'}"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --muon-lr: only applies with --optimizer muon, not adamw; add that or leave it out"
    )
    assert not (tmp_path / "run").exists()
