"""The image task's options: the bake's channels_last answer, its own bad values, and the paths of predict.py and
export.py (the engine's options are lightning-gpu-engine's tests/test_config.py's)."""

from __future__ import annotations

import pytest
from conftest import run_train
from lightning_gpu_engine import Config, ConfigError

from {{ cookiecutter.package_name }}.tasks.image_classification import TASK
from {{ cookiecutter.package_name }}.tasks.image_classification.config import (
    ExportConfig,
    ImageOptions,
    PredictConfig,
)


def test_channels_last_defaults_to_the_answer_given_when_the_project_was_generated() -> None:
    # yes: unset, which is on with CUDA and off on CPUs; no: off everywhere
    assert Config(**TASK.default_values).channels_last is {{ "None" if cookiecutter.channels_last == "yes" else "False" }}


def test_a_bad_image_option_names_its_flag() -> None:
    with pytest.raises(ConfigError, match=r"^--data: "):
        ImageOptions(data="imagenet")


def test_help_shows_the_image_options_beside_the_engines() -> None:
    result = run_train("--help")
    assert result.returncode == 0
    for flag in ("--channels-last, --no-channels-last", "--image-size", "--model", "--devices"):
        assert flag in result.stdout


def test_predict_and_export_paths_with_a_name_over_255_bytes_name_their_flag() -> None:
    """train.py's --output-dir and --data-dir are checked end to end in test_inputs.py; these share the check."""
    long = "x" * 256
    with pytest.raises(ConfigError, match=r"^--output: xxx.* 256-byte name, the limit is 255"):
        PredictConfig(checkpoint="last.ckpt", output=f"{long}/p.csv")
    with pytest.raises(ConfigError, match=r"^--checkpoint: "):
        ExportConfig(checkpoint=f"{long}.ckpt")
