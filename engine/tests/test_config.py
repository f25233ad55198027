"""Options as a user gives them, on the toy task: flags over a YAML file over the defaults, and a bad value is one line
naming its flag. A project's own options are its task's tests'."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lightning_gpu_engine import parse_run, train
from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError, parse_betas, parse_every
from lightning_gpu_engine.testing.processes import heavy_imports_blocked, one_error_line

from .conftest import run_toy


def parse_args(toy: ModuleType, argv: list[str]) -> tuple[Config, Any]:
    """my_task.py's options: the engine's, and the task's own beside them."""
    return parse_run(argv, toy.TASK)


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("precision", "8", "--precision"),
        ("strategy", "horovod", "--strategy"),
        ("devices", "abc", "--devices"),
        ("devices", "0", "--devices"),
        ("devices", "-2", "--devices"),
        ("batch_size", 0, "--batch-size"),
        ("max_steps", 0, "--max-steps"),
        ("lr", 0.0, "--lr"),
        ("warmup_fraction", 1.0, "--warmup-fraction"),
        ("logger", "comet", "--logger"),
        ("betas", "0.9", "--betas"),
        ("betas", "0.9,1.0", "--betas"),
        ("betas", "0.9,-0.1", "--betas"),
        ("betas", "0.9,nan", "--betas"),
        ("betas", "0.9,0.95,0.99", "--betas"),
        ("val_every", 0, "--val-every"),
        ("val_batches", -1, "--val-batches"),
    ],
)
def test_bad_values_name_their_flag(field: str, value: object, flag: str) -> None:
    with pytest.raises(ConfigError, match=f"^{flag}: "):
        Config(**{field: value})  # type: ignore[arg-type]


def test_flags_override_yaml_which_overrides_defaults_for_the_engines_options_and_the_tasks(
    toy: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "c.yaml").write_text("batch_size: 32\nlr: 0.01\ndevices: 2\nhidden: 16\nnoise: 0.5\n")
    cfg, opts = parse_args(toy, ["--config", str(tmp_path / "c.yaml"), "--lr", "0.5", "--no-compile", "--noise=0"])
    assert (cfg.batch_size, cfg.lr, cfg.devices, cfg.compile) == (32, 0.5, "2", False)
    assert (opts.hidden, opts.noise) == (16, 0.0)
    cfg, opts = parse_args(toy, [])  # the task's defaults for engine options, and the engine's for the rest
    engine = Config()
    expected = (toy.TASK.defaults.get("batch_size", engine.batch_size), toy.TASK.defaults.get("lr", engine.lr), 64)
    assert (cfg.batch_size, cfg.lr, opts.hidden) == expected


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("batchsize: 32\n", "unknown key 'batchsize'"),
        ("batch_size: many\n", "key 'batch_size'.*expected an integer"),
        ("hidden: wide\n", "key 'hidden'.*expected an integer"),
        ("precision: 8\n", "--precision: '8' is not one of"),
        ("- a list\n", "must hold a mapping"),
    ],
)
def test_bad_yaml_is_one_line_and_exit_2(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, message: str
) -> None:
    (tmp_path / "c.yaml").write_text(yaml_text)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(toy, ["--config", str(tmp_path / "c.yaml")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.search(message, err)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--precision", "8"], "--precision: '8' is not one of: auto, bf16-mixed, bf16-true, 16-mixed, 32-true"),
        (["--devices", "abc"], "--devices: expected 'auto', a positive count or distinct GPU ids"),
        (["--batch-size", "x"], "argument --batch-size: expected an integer, got 'x'"),
        (["--hidden", "x"], "argument --hidden: expected an integer, got 'x'"),
        (["--betas", "0.9;0.95"], "--betas: expected two numbers in [0, 1) like '0.9,0.95', got '0.9;0.95'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_flag_is_one_line_no_traceback_exit_2(
    toy: ModuleType, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    """In this process, through `train` (the entry points' own doors: the test after the next)."""
    with pytest.raises(SystemExit) as refused, heavy_imports_blocked():
        train(toy.TASK, args)
    assert refused.value.code == 2
    assert expected in one_error_line(capsys)


def test_help_shows_every_option_with_its_default_and_reason(my_task: Path, toy: ModuleType) -> None:
    result = run_toy(my_task, "--help")
    assert result.returncode == 0
    for flag in ("--devices", "--num-nodes", "--compile, --no-compile", "--hidden", "--samples"):
        assert flag in result.stdout
    text = " ".join(result.stdout.split())
    assert "bf16-mixed on Ampere+" in text
    assert f"(default: {toy.TASK.defaults.get('batch_size', Config().batch_size)})" in text
    assert "a few % speed" in text, "help text with a percent sign reads as written"


@pytest.mark.parametrize(
    ("given", "betas"),
    [("--betas=0.8,0.9", "0.8,0.9"), ("betas: [0.8, 0.99]", "0.8,0.99"), ("betas: 0.85, 0.9", "0.85,0.9")],
)
def test_betas_are_two_numbers_given_with_a_comma_or_in_yaml_as_a_list(
    toy: ModuleType, tmp_path: Path, given: str, betas: str
) -> None:
    (tmp_path / "c.yaml").write_text(given + "\n")
    argv = [given] if given.startswith("--") else ["--config", str(tmp_path / "c.yaml")]
    assert parse_args(toy, argv)[0].betas == betas
    assert parse_betas(betas) == tuple(float(b) for b in betas.split(","))


@pytest.mark.parametrize("source", ["flag", "yaml"])
def test_resume_auto_stays_auto_and_numbers_still_take_auto_as_unset(
    toy: ModuleType, tmp_path: Path, source: str
) -> None:
    """`--resume auto` is what scripts/slurm.sbatch passes on every (re)start; read as unset, requeues started over."""
    (tmp_path / "c.yaml").write_text("resume: auto\nnum_workers: auto\n")
    argv = ["--resume", "auto", "--num-workers", "auto"] if source == "flag" else ["--config", str(tmp_path / "c.yaml")]
    cfg, _ = parse_args(toy, argv)
    assert cfg.resume == "auto"
    assert cfg.num_workers is None
    assert parse_args(toy, ["--resume", "none"])[0].resume is None


@pytest.mark.parametrize(
    ("every", "expected"),
    [("30min", (None, 1800.0)), ("500steps", (500, None)), ("1h,200steps", (200, 3600.0)), ("off", (None, None))],
)
def test_checkpoint_every_reads_time_and_steps(
    toy: ModuleType, every: str, expected: tuple[int | None, float | None]
) -> None:
    assert parse_every(parse_args(toy, ["--checkpoint-every", every])[0].checkpoint_every) == expected
