"""The language model through its doors: train.py and generate.py as subprocesses, signals to the process group, and
Hugging Face GPT-2 folders written by `transformers` itself."""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from conftest import ROOT, SAVING, run_script, run_train, script_env
from lightning_gpu_engine import read_checkpoint, testing
from lightning_gpu_engine.testing import ReferenceRuns

from {{ cookiecutter.package_name }}.tasks.language_model.gpt import GPT, load_hf_gpt2


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]


def first_steps(output: str) -> int:
    return int(re.search(r"epoch 1/1 done in \d+ s, step (\d+)", output).group(1))  # type: ignore[union-attr]


def summary(result: subprocess.CompletedProcess[str]) -> dict[str, float]:
    line = next(x for x in result.stdout.splitlines() if x.startswith(("best ", "last ")))
    return {k: float(v) for k, v in re.findall(r"(\S+?)=(-?[\d.]+|nan)\b", line)}


def readme_commands(start: str) -> list[list[str]]:
    """The README's `python ...` lines, as argv, from the one that begins with `start` to the end of its block."""
    for block in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S):
        lines = [line.split("  #")[0] for line in block.splitlines()]
        starts = [i for i, line in enumerate(lines) if line.startswith(start)]
        if starts:
            return [shlex.split(line) for line in lines[starts[0] :] if line.startswith("python ")]
    raise AssertionError(f"the README has no line starting {start!r}")


def run_as_written(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    assert argv[0] == "python", argv
    return run_script(ROOT / argv[1], *argv[2:], cwd=cwd, timeout=900)


@pytest.mark.slow(minutes=5)
def test_the_readmes_cpu_commands_run_as_written(tmp_path: Path) -> None:
    """The quickstart gets within 0.15 nats of the entropy floor and generates from its checkpoint; the text example
    learns a tokenizer, trains on a folder and generates. Run in a folder of their own, as from the project root."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    train, generate = readme_commands("python train.py --config configs/cpu-quickstart.yaml")[:2]
    trained = run_as_written(train, tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    numbers = summary(trained)
    print(f"val/loss={numbers['val/loss']:.4f} floor={numbers['floor']:.4f}")
    assert numbers["val/loss"] - numbers["floor"] < 0.15
    assert numbers["val/loss"] > numbers["floor"] - 0.02  # below the floor would mean validation leaked into training
    generated = run_as_written(generate, tmp_path)
    assert generated.returncode == 0, generated.stderr[-3000:]
    assert generated.stdout.count("--- sample ") == 3 and "note: 61 new tokens" in generated.stdout

    texts = tmp_path / "my_texts"
    texts.mkdir()
    rng = random.Random(0)
    words = ["once", "upon", "a", "time", "there", "was", "a", "small", "cat", "in", "a", "big", "old", "house"]
    for number in range(200):
        (texts / f"story_{number:03d}.txt").write_text(" ".join(rng.choices(words, k=300)) + ".")
    commands = readme_commands("python train_tokenizer.py")
    assert [argv[1] for argv in commands] == ["train_tokenizer.py", "train.py", "generate.py"]
    for argv in commands:
        result = run_as_written(argv, tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("--- sample ") == 3 and "Once upon a time" in result.stdout


# GPT-2's recipe (nanoGPT's train.py, llm.c's train_gpt2): the task's defaults for the engine's optimizer options
RECIPE = {"lr": 6e-4, "weight_decay": 0.1, "betas": "0.9,0.95", "gradient_clip_val": 1.0}


def test_gpt2s_recipe_is_the_default_shown_with_its_source_and_trained_with(
    tiny_args: list[str], tmp_path: Path
) -> None:
    shown = run_train("--help")
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())  # argparse wraps the help at the terminal's width
    for name, value in RECIPE.items():
        flag = "--" + name.replace("_", "-")
        said = re.search(rf"{flag} {name.upper()} [^\[]*\[the task's default: ([^\]]*)\] \(default: ([^)]*)\)", text)
        assert said, flag
        assert "nanoGPT's train.py, llm.c's train_gpt2" in said.group(1) and said.group(2) == str(value), said.group(0)
    done = run_train(*tiny_args, "--max-steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert {name: config[name] for name in RECIPE} == RECIPE
    assert "data_dir" not in config and "val_fraction" not in config, "options synthetic data does not read"
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    hparams = saved["hyper_parameters"]
    assert (hparams["lr"], hparams["weight_decay"], hparams["betas"]) == (6e-4, 0.1, [0.9, 0.95])
    [optimizer] = saved["optimizer_states"]
    assert {group["betas"] for group in optimizer["param_groups"]} == {(0.9, 0.95)}
    assert sorted({group["weight_decay"] for group in optimizer["param_groups"]}) == [0.0, 0.1]


def test_a_stop_mid_epoch_then_resume_last_ends_bit_identical(tiny_args: list[str], tmp_path: Path) -> None:
    # 600 steps an epoch: the stop lands well inside the second one
    args = [*tiny_args[:-2], "--max-epochs=2", "--checkpoint-every=off", "--train-tokens=160000"]
    whole = run_train(*args, f"--output-dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    stopped_dir = tmp_path / "stopped"
    process = testing.popen(
        [sys.executable, "train.py", *args, f"--output-dir={stopped_dir}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "epoch 2/2  batch " in line:  # the second epoch has started
            os.killpg(process.pid, signal.SIGTERM)  # as `timeout` and SLURM send it: to the whole group
            break
    rest = process.communicate(timeout=120)[0]
    assert process.returncode == 128 + signal.SIGTERM, "".join(lines) + rest
    assert "stopped by SIGTERM" in rest and "--resume last" in rest
    resumed = run_train(*args, f"--output-dir={stopped_dir}", "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    before, after = (weights(d / "checkpoints" / "last.ckpt") for d in (tmp_path / "whole", stopped_dir))
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before), "the resumed run's weights differ"
    assert summary(resumed)["test/loss"] == summary(whole)["test/loss"]


@pytest.mark.multiprocess
def test_two_processes_ddp_on_cpu_train_and_validate_once(tiny_args: list[str], tmp_path: Path) -> None:
    result = run_train(*tiny_args, "--devices=2", "--strategy=ddp")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "floor=" in result.stdout and "tokens/s" in result.stdout
    [hardware] = [line for line in result.stdout.splitlines() if line.startswith("hardware: ")]
    assert hardware.startswith("hardware: cpu x2 |") and "channels_last" not in hardware, "a GPT declares no layout"
    records = (tmp_path / "run" / "validation.jsonl").read_text().splitlines()
    assert [json.loads(r)["epoch"] for r in records] == [0]


@pytest.mark.multiprocess
@SAVING
def test_fsdp2_on_two_cpu_processes_trains_resumes_and_its_checkpoint_generates(
    formats: list[str], tiny_args: list[str], tmp_path: Path
) -> None:
    """Sharded: each rank writes its own shards, in the background; generate.py reads the folder as it is."""
    args = [*tiny_args, *formats, "--devices=2", "--strategy=fsdp", "--activation-checkpointing"]
    first = run_train(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "FSDP2: 2 blocks and the rest sharded over 2 processes, activations recomputed" in first.stdout
    resumed = run_train(*args[:-3], "--max-epochs=2", *args[-3:], "--resume=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    saved = read_checkpoint(checkpoint)
    if formats:  # every rank wrote its part, of every weight: none was gathered
        assert sorted(p.name for p in checkpoint.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
        shards = torch.load(checkpoint / "meta.pt", weights_only=True)
        assert "state_dict" not in shards and "optimizer_states" not in shards
    assert "epoch 2/2 done" in resumed.stdout and "epoch 1/2 done" not in resumed.stdout  # continued, not redone
    assert saved["epoch"] == 1 and saved["global_step"] == 2 * first_steps(first.stdout)
    assert all(type(t) is torch.Tensor for t in saved["state_dict"].values()), "plain tensors, not DTensor shards"
    generated = run_script("generate.py", "--checkpoint", str(checkpoint), "--prompt=ab", "--max-new-tokens=4")
    assert generated.returncode == 0, generated.stderr[-3000:]


def hf_gpt2(folder: Path, vocab_size: int = 257, positions: int = 64) -> Any:
    """A randomly initialised transformers GPT-2, saved as Hugging Face saves one."""
    import transformers  # declared in the dev extra: a plain import, so a missing declaration fails rather than skips

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab_size, n_positions=positions, n_embd=64, n_layer=2, n_head=4)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(folder)
    return model


def test_hugging_face_gpt2_weights_load_with_the_same_logits(tmp_path: Path) -> None:
    reference = hf_gpt2(tmp_path / "gpt2")
    net = GPT(vocab_size=257, layers=2, heads=4, width=64, context=64).eval()
    load_hf_gpt2(net, tmp_path / "gpt2")
    tokens = torch.randint(0, 257, (2, 40))
    with torch.no_grad():
        expected = reference(tokens).logits
        ours = net(tokens)[..., :257]
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-4)
    # greedy generation from the folder, through generate.py, follows Hugging Face's own greedy decoding
    prompt = "hello"
    with torch.no_grad():
        hf_ids = reference.generate(
            torch.tensor([list(prompt.encode())]), max_new_tokens=8, do_sample=False, pad_token_id=256
        )[0, len(prompt) :].tolist()
    out = tmp_path / "greedy.jsonl"
    args = ["--pretrained", str(tmp_path / "gpt2"), "--tokenizer=bytes", "--prompt", prompt, "--top-k=1"]
    result = run_script("generate.py", *args, "--max-new-tokens=8", f"--output={out}", "--accelerator=cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    [sample] = [json.loads(line) for line in out.read_text().splitlines()]
    assert sample["prompt"] == prompt
    assert sample["tokens"] == hf_ids[: len(sample["tokens"])] and len(sample["tokens"]) >= 1


@pytest.fixture(scope="module")
def trained(references: ReferenceRuns, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of one epoch of the tiny model, trained once per run for every file that asks (test_lm_inputs)."""
    from .conftest import TINY

    folder = tmp_path_factory.mktemp("trained") / "run"
    command = [sys.executable, "train.py", *TINY, "--max-epochs=1", "--output-dir={out}"]
    references.copy(command, {"out": folder}, ROOT, script_env())
    return folder / "checkpoints" / "last.ckpt"


def test_generation_is_the_same_for_the_same_seed_and_greedy_with_top_k_1(trained: Path, tmp_path: Path) -> None:
    def generate(*extra: str) -> list[dict[str, object]]:
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}.jsonl"
        args = ["--checkpoint", str(trained), "--prompt", "ab", "--max-new-tokens=12", f"--output={out}", *extra]
        result = run_script("generate.py", *args)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.count("--- sample") == len(out.read_text().splitlines())
        return [json.loads(line) for line in out.read_text().splitlines()]

    first, again, other = (
        generate("--seed=1", "--num-samples=3"),
        generate("--seed=1", "--num-samples=3"),
        generate("--seed=2", "--num-samples=3"),
    )
    assert first == again and first != other
    assert {tuple(s.keys()) for s in first} == {("prompt", "text", "tokens")}
    # greedy: each token the argmax of the whole sequence's logits, recomputed without the KV cache
    [greedy] = generate("--top-k=1", "--temperature=0.5")
    hparams = torch.load(trained, map_location="cpu", weights_only=True)["hyper_parameters"]
    net = GPT(*(hparams[k] for k in ("vocab_size", "layers", "heads", "width", "positions"))).eval()
    net.load_state_dict({k[4:]: v for k, v in weights(trained).items() if k.startswith("net.")})
    ids = list(b"ab")
    with torch.no_grad():
        for _ in greedy["tokens"]:  # type: ignore[attr-defined]
            ids.append(int(net(torch.tensor([ids]))[0, -1, :257].argmax()))
            if ids[-1] == 256:
                break
    assert greedy["tokens"] == ids[2:]
