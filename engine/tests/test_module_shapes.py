"""Every shape of LightningModule keeps each engine feature that applies to it, and the engine says which do not: the
GAN and the LSTM forecaster of team_tasks/, trained in this process through the engine's front door (`main`)."""

from __future__ import annotations

import csv
import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from lightning_gpu_engine import Task, train
from lightning_gpu_engine.bench import any_task
from lightning_gpu_engine.trainer.trainer import RunDDP, build_strategy

from .conftest import TOY, guide
from .team_tasks import gan, sequence

# TOY less the toy's own --samples: 256 points in batches of 16, 16 steps an epoch
ENGINE = [flag for flag in TOY if not flag.startswith(("--samples", "--batch-size"))] + ["--batch-size=16"]
GAN = [*ENGINE, "--samples=256", "--latent=4", "--hidden=8"]
LSTM = [*ENGINE, "--samples=256", "--window=6", "--hidden=4"]


def checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def metrics(out: Path) -> list[dict[str, str]]:
    with open(out / "logs" / "version_0" / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


def settings(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each param group's settings (lr, weight_decay, betas, ...): all but its parameters."""
    return [{k: v for k, v in group.items() if k != "params"} for group in groups]


def refused(task: Task, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line `train` answers `argv` with, exit code 2."""
    with pytest.raises(SystemExit) as stop:
        train(task, argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and err.count("\n") == 1 and "Traceback" not in out + err, out + err
    return err.strip()


def test_flags_lightning_refuses_under_manual_optimization_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Declared in the Task: refused as the flags are read. Not declared: once the module is built, still one line,
    before Lightning's 30-line MisconfigurationException."""
    out = f"--output-dir={tmp_path / 'never'}"
    manual = "not an option of this task: the module steps its own optimizers (manual optimization)"
    assert refused(gan.TASK, [*GAN, "--gradient-clip-val=1.0", out], capsys).startswith(
        f"error: --gradient-clip-val: {manual}"
    )
    assert refused(gan.TASK, [*GAN, "--accumulate-grad-batches", "2", out], capsys).startswith(
        f"error: --accumulate-grad-batches: {manual}"
    )
    undeclared = dataclasses.replace(gan.TASK, manual_optimization=False)
    said = refused(undeclared, [*GAN, "--gradient-clip-val=1.0", out], capsys)
    assert said.startswith("error: --gradient-clip-val: GAN: the module steps its own optimizers"), said
    assert said.endswith("declare Task(manual_optimization=True)"), said
    assert not (tmp_path / "never").exists()


def test_engine_options_a_task_declares_not_applicable_are_off_its_help_and_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as shown:
        train(gan.TASK, ["--help"])
    assert shown.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ("--weight-decay", "--betas", "--optimizer", "--muon-lr", "--warmup-fraction"):
        assert flag not in help_text, f"{flag} is offered to a GAN whose Adams are its own"
    assert "--lr" in help_text and "--latent" in help_text, "what applies is offered"
    out = f"--output-dir={tmp_path / 'never'}"
    said = refused(gan.TASK, [*GAN, "--weight-decay", "0.1", out], capsys)
    assert said == "error: --weight-decay: not an option of this task: " + gan.OWN_ADAMS
    config = tmp_path / "options.yaml"
    config.write_text("betas: 0.5,0.9\n")
    said = refused(gan.TASK, [*GAN, f"--config={config}", out], capsys)
    assert said == f"error: --config: key 'betas' in {config} is not an option of this task ({gan.OWN_ADAMS}); " + (
        "delete the line"
    )
    assert not (tmp_path / "never").exists()


def test_a_modules_own_optimizer_comes_back_as_saved_whatever_the_engine_options_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The forecaster's Adam has weight_decay 0 and a per-epoch StepLR. Its Task here does not even declare the
    optimizer options not applicable: a resume with other values still gives its param groups back as saved, and
    says that it ignores them."""
    task = dataclasses.replace(sequence.TASK, not_applicable={})
    out = f"--output-dir={tmp_path / 'run'}"
    train(task, [*LSTM, "--max-steps=20", out])  # into its second epoch: the StepLR has stepped once
    saved = checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    loaded: list[list[dict[str, Any]]] = []

    def at_train_start(self: L.LightningModule) -> None:
        loaded.append(settings(self.optimizers().optimizer.param_groups))  # type: ignore[union-attr]

    monkeypatch.setattr(sequence.Forecaster, "on_train_start", at_train_start)
    capsys.readouterr()
    train(task, [*LSTM, "--max-steps=24", out, "--resume=last", "--weight-decay=0.3", "--lr=0.5", "--betas=0.8,0.9"])
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("resume: ")]
    own = "Forecaster builds its own optimizers, whose saved state comes back as it was saved"
    assert said == [
        f"resume: --lr 0.5 is ignored (the checkpoint's was 0.01): {own}",
        f"resume: --weight-decay 0.3 is ignored (the checkpoint's was 0.05): {own}",
        f"resume: --betas 0.8,0.9 is ignored (the checkpoint's was 0.9,0.999): {own}",
        "resume: --max-steps 24 instead of the checkpoint's 20: the run goes on to it; the module's own schedulers "
        "go on from their saved state",
    ], said
    [groups] = saved["optimizer_states"]
    assert loaded == [settings(groups["param_groups"])], "the param groups as saved"
    assert {group["weight_decay"] for group in groups["param_groups"]} == {0}
    final = checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert {group["weight_decay"] for group in final["optimizer_states"][0]["param_groups"]} == {0}
    assert final["lr_schedulers"][0]["base_lrs"] == saved["lr_schedulers"][0]["base_lrs"] == [0.01]


def test_a_step_is_a_batch_that_stepped_the_optimizers_for_every_step_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GAN steps two optimizers a batch. Lightning counted each, so `--checkpoint-every 7steps` saved every 14
    batches (global_step was always even), `--val-every 7` validated every 14 and `--max-steps 15` trained 8
    batches. The engine counts the batches that stepped, as the guide says."""
    saves: list[tuple[str, int, int]] = []
    save = L.Trainer.save_checkpoint

    def counted(trainer: L.Trainer, path: Any, *args: Any, **kwargs: Any) -> None:
        batches = trainer.fit_loop.epoch_loop.batch_progress.total.ready  # this one included
        saves.append((Path(path).name, trainer.global_step, batches))
        save(trainer, path, *args, **kwargs)

    monkeypatch.setattr(L.Trainer, "save_checkpoint", counted)
    out = tmp_path / "run"
    steps = ["--max-steps=15", "--checkpoint-every=7steps", "--val-every=7", "--val-batches=1"]
    train(gan.TASK, [*GAN, *steps, "--max-epochs=1", f"--output-dir={out}"])
    periodic = [(step, batches) for name, step, batches in saves if name == "last.ckpt"]
    assert periodic[:2] == [(7, 7), (14, 14)], "saved after steps 7 and 14: batches 7 and 14"
    validated = [json.loads(line)["step"] for line in (out / "validation.jsonl").read_text().splitlines()]
    assert validated == [7, 14]
    final = checkpoint(out / "checkpoints" / "last.ckpt")
    batches = final["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]["completed"]
    assert final["global_step"] == batches == 15, "--max-steps 15: 15 batches"
    flops = [float(row["train/device/flops_per_sec"]) for row in metrics(out) if row.get("train/device/flops_per_sec")]
    assert flops and min(flops) > 0, "the FLOPs of both networks, counted on example_input's mapping"


def test_compile_compiles_the_networks_a_task_names_and_says_so_where_it_compiles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Dynamo's capture, counted with its eager backend (inductor would only turn the same graphs into kernels)."""
    from torch._dynamo.utils import counters

    compile_module = nn.Module.compile
    monkeypatch.setattr(nn.Module, "compile", lambda net, **_: compile_module(net, backend="eager", dynamic=False))
    torch._dynamo.reset()
    runs = {"named": (gan.TASK, GAN), "unnamed": (dataclasses.replace(gan.TASK, networks="net"), GAN)}
    undeclared = dataclasses.replace(sequence.TASK, compile_off=None)
    runs |= {"lstm": (sequence.TASK, LSTM), "lstm-undeclared": (undeclared, LSTM)}
    said: dict[str, tuple[str, list[str]]] = {}
    graphs: dict[str, int] = {}
    for name, (task, flags) in runs.items():
        before = counters["stats"]["unique_graphs"]
        train(task, [*flags, "--max-steps=2", "--compile", f"--output-dir={tmp_path / name}"])
        graphs[name] = counters["stats"]["unique_graphs"] - before
        lines = capsys.readouterr().out.splitlines()
        said[name] = (lines[0], [line for line in lines if line.startswith("warning: compile: ")])
    torch._dynamo.reset()
    assert graphs["named"] >= 2 and said["named"] == (said["named"][0], []), "both networks, in training and eval"
    assert "compile=True" in said["named"][0]
    line, warned = said["unnamed"]
    assert graphs["unnamed"] == 0 and "compile=off (GAN has no net: name its networks in Task(networks=...))" in line
    assert warned == [
        "warning: compile: --compile compiles nothing: GAN has no network 'net' (its modules: nets); name the "
        "networks to compile and count in Task(networks=...)"
    ]
    line, warned = said["lstm"]
    assert graphs["lstm"] == 0 and f"compile=off ({sequence.TASK.compile_off}) pin_memory=" in line and not warned
    line, warned = said["lstm-undeclared"]
    assert graphs["lstm-undeclared"] == 0 and "compile=True" in line
    assert len(warned) == 1 and warned[0].startswith(
        "warning: compile: --compile: dynamo captured no graph of net in the first training step, so nothing runs"
    )


def test_a_tasks_ddp_declarations_reach_the_strategy() -> None:
    from lightning_gpu_engine import Config
    from lightning_gpu_engine.perf import hardware

    cfg = Config(accelerator="cpu", precision="32-true", strategy="ddp", devices="2")
    hw = hardware.resolve(cfg)
    plain = build_strategy(cfg, hw, task=sequence.TASK)
    assert isinstance(plain, RunDDP) and plain._ddp_kwargs["find_unused_parameters"] is False
    gans = build_strategy(cfg, hw, task=gan.TASK)
    assert isinstance(gans, RunDDP) and gans._ddp_kwargs["find_unused_parameters"] is True
    own = dataclasses.replace(gan.TASK, find_unused_parameters=False, lightning_strategy="ddp_static_graph")
    assert build_strategy(cfg, hw, task=own) == "ddp_static_graph"
    with pytest.raises(TypeError, match="give find_unused_parameters or lightning_strategy, not both"):
        dataclasses.replace(gan.TASK, lightning_strategy="ddp_find_unused_parameters_true")


def test_length_fn_counts_a_batchs_items_in_the_docs_the_monitor_and_the_bench(tmp_path: Path) -> None:
    """One meaning everywhere: items per batch, as batch_size_fn counts samples per batch. The forecaster reads 6
    values per window: 6 items per sample, in train/device/items_per_sec and bench.py's items/s alike."""
    documented = inspect.getsource(Task)
    assert "items per batch" in documented and "items per sample" not in documented
    assert "items per batch" in guide("bring-your-own-task")
    out = tmp_path / "run"
    train(sequence.TASK, [*LSTM, "--max-steps=4", f"--output-dir={out}"])
    [row] = [r for r in metrics(out) if r.get("train/device/items_per_sec")][-1:]
    assert float(row["train/device/items_per_sec"]) / float(row["train/device/samples_per_sec"]) == pytest.approx(6)
    bench = ["--only=fp32", "--warmup=1", "--steps=2", f"--json={tmp_path / 'bench.json'}"]
    [timed] = any_task.main(["--task", sequence.__file__, *bench, *LSTM])["settings"]
    assert timed["items_per_s"] == pytest.approx(6 * timed["samples_per_s"])
    [timed] = any_task.main(["--task", gan.__file__, *bench, *GAN])["settings"]
    assert timed["flops_per_batch"] > 0, "a LightningModule of its own, its networks counted on example_input"


def test_flops_that_cannot_be_counted_are_said_in_a_note_and_counted_as_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """0 is what the throughput monitor takes as "not counted": it then logs no FLOP rate or MFU at all
    (test_monitors.py), rather than a 0.0 that reads as a measurement."""
    from lightning_gpu_engine import batch_flops

    module = gan.GAN(latent=4, hidden=8, lr=1e-3, beta1=0.5)
    module.engine_networks = gan.TASK.networks  # type: ignore[assignment]  # as Task.build puts them
    assert batch_flops(module, 16) > 0, "both networks, each on its own input"
    module.engine_networks = ("nets.generator",)  # type: ignore[assignment]  # example_input names one more
    assert batch_flops(module, 16) == 0
    [said] = capsys.readouterr().out.splitlines()
    assert said.startswith("note: FLOPs of nets.generator (Sequential) cannot be counted on the meta device (TypeError")
    assert said.endswith("; no MFU logged")
