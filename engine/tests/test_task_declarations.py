"""What a `Task` declares reaches the command line as the guide says: its defaults, its layout, its script's name;
and an experiment tracker that is not installed is one line. Each is run as a user runs the task's script."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml

from lightning_gpu_engine import Config, TaskDefault
from lightning_gpu_engine.config.cli import build_parser

from .conftest import run_toy

# The toy task's own defaults (guide: defaults={"batch_size": 64, "lr": 3e-3}) are left to the task here.
PLAIN = ["--accelerator=cpu", "--precision=32-true", "--strategy=auto", "--num-workers=0", "--logger=csv"]
PLAIN += ["--samples=256", "--max-epochs=1", "--log-every-n-steps=1"]


def saved_options(out: Path) -> dict[str, object]:
    return yaml.safe_load((out / "config.yaml").read_text())


def test_help_names_the_script_and_shows_the_tasks_defaults(my_task: Path) -> None:
    shown = run_toy(my_task, "--help")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: my_task.py ")
    text = " ".join(shown.stdout.split())  # argparse wraps the help at the terminal's width
    assert re.search(r"--batch-size BATCH_SIZE per device; .*? \[the task's default\] \(default: 64\)", text)
    assert re.search(r"--lr LR AdamW peak learning rate, .*? \[the task's default\] \(default: 0\.003\)", text)
    assert re.search(r"--weight-decay WEIGHT_DECAY AdamW .*? \(default: 0\.05\)", text), "the engine's own default"


def test_a_task_default_given_with_its_reason_shows_it_in_help(toy: ModuleType) -> None:
    defaults = {"lr": TaskDefault(0.01, "the rate that converges here"), "batch_size": 16}
    parser = build_parser(Config, toy.TASK.options, prog="my_task.py", description="", defaults=defaults)
    text = " ".join(parser.format_help().split())
    assert "[the task's default: the rate that converges here] (default: 0.01)" in text
    assert "[the task's default] (default: 16)" in text
    assert dataclasses.replace(toy.TASK, defaults=defaults).default_values == {"lr": 0.01, "batch_size": 16}


def test_flags_override_the_config_file_which_overrides_the_tasks_defaults(my_task: Path, tmp_path: Path) -> None:
    alone = run_toy(my_task, *PLAIN, f"--output-dir={tmp_path / 'alone'}")
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert saved_options(tmp_path / "alone")["batch_size"] == 64, "the task's default, with no flag"
    assert saved_options(tmp_path / "alone")["weight_decay"] == 0.05, "the engine's, where the task sets none"
    config = tmp_path / "options.yaml"
    config.write_text("batch_size: 16\nlr: 0.01\n")
    filed = run_toy(my_task, *PLAIN, f"--config={config}", "--lr=0.02", f"--output-dir={tmp_path / 'filed'}")
    assert filed.returncode == 0, filed.stderr[-3000:]
    assert saved_options(tmp_path / "filed")["batch_size"] == 16, "the file over the task's default"
    assert saved_options(tmp_path / "filed")["lr"] == 0.02, "the flag over the file"


def test_a_task_that_declares_no_layout_has_no_channels_last_flag_key_or_word(my_task: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_toy(my_task, *PLAIN, f"--output-dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("hardware: cpu x1 | precision=32-true compile=False pin_memory=False")
    assert "channels_last" not in saved_options(out), "config.yaml holds only options the task has"
    refused = run_toy(my_task, *PLAIN, "--channels-last", f"--output-dir={tmp_path / 'never'}")
    layout = "the task declares no layout (Task.channels_last)"
    want = f"error: --channels-last: not an option of this task: {layout}"
    assert (refused.returncode, refused.stderr.strip()) == (2, want)
    config = tmp_path / "nhwc.yaml"
    config.write_text("channels_last: true\n")
    refused = run_toy(my_task, *PLAIN, f"--config={config}", f"--output-dir={tmp_path / 'never'}")
    assert refused.returncode == 2
    want = f"error: --config: key 'channels_last' in {config} is not an option of this task ({layout}); delete the line"
    assert refused.stderr.strip() == want
    assert not (tmp_path / "never").exists()


@pytest.fixture(scope="module")
def conv_task(my_task: Path) -> Path:
    """The guide's task, written as the guide says a convolutional one is: 2x2x2 images of its 8 features into a
    Conv2d network, and channels_last=True."""
    text = my_task.read_text()
    changes = {
        "nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1)": (
            "nn.Conv2d(2, hidden, 2), nn.GELU(), nn.Flatten(), nn.Linear(hidden, 1)"
        ),
        "self.net(x)": "self.net(x.view(-1, 2, 2, 2))",
        'torch.empty(batch_size, self.hparams["features"])': "torch.empty(batch_size, 2, 2, 2)",
        '    mode="min",\n': '    mode="min",\n    channels_last=True,\n',
    }
    for old, new in changes.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = my_task.with_name("conv_task.py")
    path.write_text(text)
    return path


@pytest.mark.parametrize(("flag", "nhwc"), [("--channels-last", True), ("--no-channels-last", False), (None, False)])
def test_a_task_that_declares_channels_last_trains_its_network_in_it_when_on(
    conv_task: Path, tmp_path: Path, flag: str | None, nhwc: bool
) -> None:
    """Unset, a CPU in fp32 keeps NCHW (NHWC measured slower there); the checkpoint keeps each tensor's strides."""
    out = tmp_path / "run"
    done = run_toy(conv_task, *PLAIN, *([flag] if flag else []), f"--output-dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"channels_last={nhwc} pin_memory=False" in done.stdout.splitlines()[0]
    weight = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]["net.0.weight"]
    assert weight.ndim == 4 and weight.is_contiguous(memory_format=torch.channels_last) is nhwc
    assert not re.search("warning: .*channels_last", done.stdout + done.stderr), "the engine's layout promise held"


def test_a_tracker_that_is_not_installed_is_one_line_before_anything_is_written(my_task: Path, tmp_path: Path) -> None:
    """The task's script run as on a machine without the trackers, whether or not this one has them: their imports
    fail as a missing package's do."""
    without = tmp_path / "without_trackers.py"
    without.write_text(
        "import runpy, sys\n"
        "sys.modules['wandb'] = sys.modules['mlflow'] = None\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    for tracker in ("wandb", "mlflow"):
        args = [str(my_task), *PLAIN, f"--logger={tracker}", f"--output-dir={tmp_path / 'never'}"]
        refused = run_toy(without, *args)
        assert refused.returncode == 2, refused.stderr[-3000:]
        want = f"error: --logger: {tracker} is not installed: pip install {tracker}, or use tensorboard or csv"
        assert refused.stderr.strip() == want
    assert not (tmp_path / "never").exists()
