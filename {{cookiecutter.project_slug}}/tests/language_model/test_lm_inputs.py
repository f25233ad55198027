"""Every bad input of train.py's language-model options and of generate.py: one line naming the flag or file and what
would be valid, exit code 2, no traceback, and nothing left behind; what names and headers tell, before torch and
Lightning load. The tables run in this process through each script's `main`; one refusal per script runs as users
run it, a process of its own."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import heavy_imports_blocked, one_error_line, run_script, without_heavy_imports

from {{ cookiecutter.package_name }}.commands import train
from {{ cookiecutter.package_name }}.commands.generate import main as generate
from {{ cookiecutter.package_name }}.tasks.language_model.shards import GPT2, LLAMA3

from .conftest import TINY
from .test_language_model import hf_gpt2, trained  # noqa: F401  # trained: the fixture, run once per run


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of every kind of bad file the cases below name."""
    root = tmp_path_factory.mktemp("inputs")
    (root / "empty").mkdir()
    (root / "bad-jsonl").mkdir()
    (root / "bad-jsonl" / "a.jsonl").write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    (root / "latin1").mkdir()
    (root / "latin1" / "a.txt").write_bytes("caf\xe9".encode("latin-1"))
    (root / "big-tokens").mkdir()
    for split in ("train", "val"):
        header = np.zeros(256, dtype=np.int32)
        header[:3] = GPT2, 1, 4
        (root / "big-tokens" / f"x_{split}_000000.bin").write_bytes(
            header.tobytes() + np.array([1, 2, 3, 9000], np.uint16).tobytes()
        )
    # shards as a hostile user leaves them: each folder's train shard is bad in one way
    damaged = {
        "unknown-magic": (12345, 1, 4, 4),  # magic, version, token count in the header, uint16 tokens written
        "wrong-version": (LLAMA3, 1, 4, 8),
        "cut-tokens": (GPT2, 1, 400, 300),
    }
    for name, (magic, version, count, written) in damaged.items():
        (root / name).mkdir()
        header = np.zeros(256, dtype=np.int32)
        header[:3] = magic, version, count
        (root / name / "x_train_000000.bin").write_bytes(header.tobytes() + np.ones(written, np.uint16).tobytes())
    (root / "cut-header").mkdir()
    (root / "cut-header" / "x_train_000000.bin").write_bytes(header.tobytes()[:500])
    (root / "odd-nanogpt").mkdir()
    (root / "odd-nanogpt" / "train.bin").write_bytes(b"\x01\x00\x02")
    (root / "not-json.json").write_text("bytes? no")
    (root / "vision").mkdir()
    (root / "vision" / "config.json").write_text(json.dumps({"model_type": "vit"}))
    # a Lightning checkpoint of another task: weights and hparams, but not a language model's
    torch.save({"state_dict": {"net.fc.weight": torch.zeros(2, 2)}, "hyper_parameters": {"model": "resnet18"},
                "pytorch-lightning_version": "2.6.6"}, root / "classifier.ckpt")  # fmt: skip
    (root / "prompt.txt").write_text("x")
    return root


def case(files: Path, text: str) -> list[str]:
    return [part.replace("FILES", str(files)) for part in text.split()]


# Refused from the flags, the names of files and their headers: before torch and Lightning load
TRAIN_EARLY = {
    "--context=1": "--context: must be from 2 to",
    "--model=gpt5": "--model: 'gpt5' is not one of",
    "--n-embd=65 --n-head=2": "--n-embd: 65 does not divide into 2 heads",
    "--dropout=1.5": "--dropout: must be in [0, 1)",
    "--data=text": "--data-dir: --data text reads a folder",
    "--data=text --data-dir=FILES/missing": "--data-dir: FILES/missing is not a folder",
    "--data=text --data-dir=FILES/empty": "--data-dir: FILES/empty holds no .txt or .jsonl files",
    "--data=tokens --data-dir=FILES/empty": "has no *train*.bin token shards",
    "--data=tokens --data-dir=FILES/unknown-magic": "x_train_000000.bin has no known header (magic 12345)",
    "--data=tokens --data-dir=FILES/wrong-version": "is damaged: llm.c's Llama 3 magic 20240801 goes with version 7",
    "--data=tokens --data-dir=FILES/cut-tokens": "damaged: its header says 400 tokens (1824 bytes), the file has 1624",
    "--data=tokens --data-dir=FILES/cut-header": "is damaged: cut at 500 bytes, inside llm.c's 1024-byte header",
    "--data=tokens --data-dir=FILES/odd-nanogpt": "odd-nanogpt/train.bin: nanoGPT's train.bin holds uint16 tokens",
    "--tokenizer=FILES/missing.json": "--tokenizer: cannot read FILES/missing.json",
    "--tokenizer=FILES/not-json.json": "--tokenizer: FILES/not-json.json is not JSON",
    "--pretrained=FILES/vision": "--pretrained: FILES/vision holds a 'vit' model; give a GPT-2 folder",
    "--train-tokens=10": "--train-tokens: must be at least 1000",
    "--pretrained=SMALLVOCAB": "--tokenizer: has 257 tokens, the weights in",
    "--resume=FILES/none.ckpt": "--resume: no checkpoint at FILES/none.ckpt",
}
# Refused once the files' contents are read: every token, every document
TRAIN_LATE = {
    "--data=text --data-dir=FILES/bad-jsonl": 'a.jsonl:2: not a JSON object with a "text" field',
    "--data=text --data-dir=FILES/latin1": "a.txt is not UTF-8 text",
    "--data=tokens --data-dir=FILES/big-tokens": "--tokenizer: FILES/big-tokens/x_train_000000.bin holds token 9000",
    "--train-tokens=1000 --batch-size=64": "training sequences of 33 tokens: nothing would be trained",
}
GENERATE_EARLY = {
    "--prompt=hi": "--checkpoint: give a checkpoint to generate from, or --pretrained DIR",
    "--checkpoint=FILES/none.ckpt --prompt=hi": "--checkpoint: no file at FILES/none.ckpt",
    "--pretrained=FILES/vision --prompt=hi": "--pretrained: FILES/vision holds a 'vit' model",
    "--checkpoint=TRAINED": "--prompt: is empty",
    "--checkpoint=TRAINED --prompt=hi --top-k=0": "--top-k: must be a positive integer",
    "--checkpoint=TRAINED --prompt=hi --temperature=0": "--temperature: must be a positive number",
    "--checkpoint=TRAINED --prompt=hi --output=out.csv": "--output: must end in .jsonl",
    "--checkpoint=TRAINED --prompt=hi --output=FILES/missing/out.jsonl": "--output: the folder FILES/missing does not",
}
GENERATE_LATE = {
    "--checkpoint=FILES/classifier.ckpt --prompt=hi": "--checkpoint: FILES/classifier.ckpt is not a language model's",
    "--checkpoint=TRAINED --prompt=LONG": "--prompt: is 40 tokens, the model's context is 32",
    "--checkpoint=TRAINED --prompt=hi --max-new-tokens=31": "--max-new-tokens: 31 after a 2-token prompt passes",
    "--pretrained=SMALLVOCAB --tokenizer=bytes --prompt=z": "--prompt: holds token 122, outside the model's vocabulary",
}
SCRIPTS = {"train.py": train.main, "generate.py": generate}
TABLES = [
    (script, flags, expected, early)
    for script, early_cases, late_cases in (
        ("train.py", TRAIN_EARLY, TRAIN_LATE),
        ("generate.py", GENERATE_EARLY, GENERATE_LATE),
    )
    for early, cases in ((True, early_cases), (False, late_cases))
    for flags, expected in cases.items()
]


@pytest.fixture(scope="module")
def given(
    trained: Path,  # noqa: F811  # the fixture imported above
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, str]:
    """What the cases' TRAINED and SMALLVOCAB stand for: a checkpoint of train.py, and a GPT-2 folder of 100 tokens."""
    folder = tmp_path_factory.mktemp("given")
    hf_gpt2(folder / "small-vocab", vocab_size=100)
    return {"TRAINED": str(trained), "SMALLVOCAB": str(folder / "small-vocab")}


@pytest.mark.parametrize(("script", "flags", "expected", "early"), TABLES, ids=[f"{s} {f}" for s, f, *_ in TABLES])
def test_every_bad_input_is_refused_in_one_line(
    files: Path,
    given: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    script: str,
    flags: str,
    expected: str,
    early: bool,
) -> None:
    for name, value in given.items():
        flags = flags.replace(name, value)
    args = [a.replace("LONG", "x" * 40) for a in case(files, flags)]
    output = tmp_path / "out"
    extra = [*TINY, f"--output-dir={output}"] if script == "train.py" else []
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused, heavy_imports_blocked() if early else contextlib.nullcontext():
        SCRIPTS[script]([*extra, *args])
    assert refused.value.code == 2
    assert expected.replace("FILES", str(files)) in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == [], "a refused run left something behind"


@pytest.mark.parametrize(
    ("script", "flags", "expected"),
    [
        ("train.py", "--data=text --data-dir=FILES/empty", "--data-dir: FILES/empty holds no .txt or .jsonl files"),
        ("generate.py", "--checkpoint=FILES/none.ckpt --prompt=hi", "--checkpoint: no file at FILES/none.ckpt"),
    ],
)
def test_each_script_refuses_a_missing_file_in_one_line_before_importing_torch(
    files: Path, tmp_path: Path, script: str, flags: str, expected: str
) -> None:
    """As users run the scripts: a process of its own, in which torch and Lightning cannot even be imported."""
    output = tmp_path / "out"
    extra = [*TINY, f"--output-dir={output}"] if script == "train.py" else []
    result = run_script(script, *extra, *case(files, flags), env=without_heavy_imports(tmp_path / "shim"))
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {expected.replace('FILES', str(files))}"), line
    assert not output.exists()
