from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_train

from {{ cookiecutter.package_name }}.engine.cli import parse_run
from {{ cookiecutter.package_name }}.engine.config import Config, ConfigError, parse_every
from {{ cookiecutter.package_name }}.tasks.image_classification.config import ExportConfig, ImageOptions, PredictConfig


def parse_args(argv: list[str]) -> Config:
    """train.py's engine options, as parsed beside the image task's."""
    cfg, _ = parse_run(argv, ImageOptions, "the image classifier")
    return cfg


def test_defaults_are_the_answers_given_when_the_project_was_generated() -> None:
    cfg = Config()
    assert cfg.precision == "{{ cookiecutter.precision }}"
    assert cfg.strategy == "{{ cookiecutter.strategy }}"
    assert cfg.logger == "{{ cookiecutter.logger }}"
    assert cfg.channels_last is {{ cookiecutter.channels_last == "yes" }}


@pytest.mark.parametrize(
    ("schema", "field", "value", "flag"),
    [
        (Config, "precision", "8", "--precision"),
        (Config, "strategy", "horovod", "--strategy"),
        (Config, "devices", "abc", "--devices"),
        (Config, "devices", "0", "--devices"),
        (Config, "devices", "-2", "--devices"),
        (Config, "batch_size", 0, "--batch-size"),
        (Config, "max_steps", 0, "--max-steps"),
        (Config, "lr", 0.0, "--lr"),
        (Config, "warmup_fraction", 1.0, "--warmup-fraction"),
        (ImageOptions, "data", "imagenet", "--data"),
        (Config, "logger", "comet", "--logger"),
    ],
)
def test_bad_values_name_their_flag(schema: type, field: str, value: object, flag: str) -> None:
    with pytest.raises(ConfigError, match=f"^{flag}: "):
        schema(**{field: value})


def test_flags_override_yaml_which_overrides_defaults(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("batch_size: 32\nlr: 0.01\nchannels_last: false\ndevices: 2\n")
    cfg = parse_args(["--config", str(tmp_path / "c.yaml"), "--lr", "0.5", "--no-compile"])
    assert (cfg.batch_size, cfg.lr, cfg.channels_last, cfg.devices, cfg.compile) == (32, 0.5, False, "2", False)
    assert parse_args([]).batch_size == Config().batch_size


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("batchsize: 32\n", "unknown key 'batchsize'"),
        ("batch_size: many\n", "key 'batch_size'.*expected an integer"),
        ("precision: 8\n", "--precision: '8' is not one of"),
        ("- a list\n", "must hold a mapping"),
    ],
)
def test_bad_yaml_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, message: str
) -> None:
    (tmp_path / "c.yaml").write_text(yaml_text)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--config", str(tmp_path / "c.yaml")])
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
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_flag_is_one_line_no_traceback_exit_2(args: list[str], expected: str) -> None:
    result = run_train(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and expected in lines[0]


def test_help_shows_every_option_with_its_default_and_reason() -> None:
    result = run_train("--help")
    assert result.returncode == 0
    for flag in ("--devices", "--num-nodes", "--compile, --no-compile", "--channels-last, --no-channels-last"):
        assert flag in result.stdout
    assert "bf16-mixed on Ampere+" in " ".join(result.stdout.split())
    assert "(default: 128)" in result.stdout


@pytest.mark.parametrize("source", ["flag", "yaml"])
def test_resume_auto_stays_auto_and_numbers_still_take_auto_as_unset(tmp_path: Path, source: str) -> None:
    """`--resume auto` is what scripts/slurm.sbatch passes on every (re)start; read as unset, requeues started over."""
    (tmp_path / "c.yaml").write_text("resume: auto\nnum_workers: auto\n")
    argv = ["--resume", "auto", "--num-workers", "auto"] if source == "flag" else ["--config", str(tmp_path / "c.yaml")]
    cfg = parse_args(argv)
    assert cfg.resume == "auto"
    assert cfg.num_workers is None
    assert parse_args(["--resume", "none"]).resume is None


def test_help_text_with_a_percent_sign_reads_as_written() -> None:
    result = run_train("--help")
    assert result.returncode == 0
    assert "a few % speed" in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    ("every", "expected"),
    [("30min", (None, 1800.0)), ("500steps", (500, None)), ("1h,200steps", (200, 3600.0)), ("off", (None, None))],
)
def test_checkpoint_every_reads_time_and_steps(every: str, expected: tuple[int | None, float | None]) -> None:
    assert parse_every(parse_args(["--checkpoint-every", every]).checkpoint_every) == expected


def test_predict_and_export_paths_with_a_name_over_255_bytes_name_their_flag() -> None:
    """train.py's --output-dir and --data-dir are checked end to end in test_inputs.py; these share the check."""
    long = "x" * 256
    with pytest.raises(ConfigError, match=r"^--output: xxx.* 256-byte name, the limit is 255"):
        PredictConfig(checkpoint="last.ckpt", output=f"{long}/p.csv")
    with pytest.raises(ConfigError, match=r"^--checkpoint: "):
        ExportConfig(checkpoint=f"{long}.ckpt")
