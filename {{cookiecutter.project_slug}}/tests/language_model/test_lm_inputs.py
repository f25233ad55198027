"""Every bad input of train.py's language-model options and of generate.py: one line naming the flag or file and what
would be valid, exit code 2, no traceback, and nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_script

from {{ cookiecutter.package_name }}.tasks.language_model.shards import GPT2, LLAMA3

from .conftest import TINY


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


TRAIN = {
    "--context=1": "--context: must be from 2 to",
    "--model=gpt5": "--model: 'gpt5' is not one of",
    "--n-embd=65 --n-head=2": "--n-embd: 65 does not divide into 2 heads",
    "--dropout=1.5": "--dropout: must be in [0, 1)",
    "--data=text": "--data-dir: --data text reads a folder",
    "--data=text --data-dir=FILES/missing": "--data-dir: FILES/missing is not a folder",
    "--data=text --data-dir=FILES/empty": "--data-dir: FILES/empty holds no .txt or .jsonl files",
    "--data=text --data-dir=FILES/bad-jsonl": 'a.jsonl:2: not a JSON object with a "text" field',
    "--data=text --data-dir=FILES/latin1": "a.txt is not UTF-8 text",
    "--data=tokens --data-dir=FILES/empty": "has no *train*.bin token shards",
    "--data=tokens --data-dir=FILES/big-tokens": "--tokenizer: FILES/big-tokens/x_train_000000.bin holds token 9000",
    "--data=tokens --data-dir=FILES/unknown-magic": "x_train_000000.bin has no known header (magic 12345)",
    "--data=tokens --data-dir=FILES/wrong-version": "is damaged: llm.c's Llama 3 magic 20240801 goes with version 7",
    "--data=tokens --data-dir=FILES/cut-tokens": "damaged: its header says 400 tokens (1824 bytes), the file has 1624",
    "--data=tokens --data-dir=FILES/cut-header": "is damaged: cut at 500 bytes, inside llm.c's 1024-byte header",
    "--data=tokens --data-dir=FILES/odd-nanogpt": "odd-nanogpt/train.bin: nanoGPT's train.bin holds uint16 tokens",
    "--tokenizer=FILES/missing.json": "--tokenizer: cannot read FILES/missing.json",
    "--tokenizer=FILES/not-json.json": "--tokenizer: FILES/not-json.json is not JSON",
    "--pretrained=FILES/vision": "--pretrained: FILES/vision holds a 'vit' model; give a GPT-2 folder",
    "--train-tokens=10": "--train-tokens: must be at least 1000",
    "--train-tokens=1000 --batch-size=64": "training sequences of 33 tokens: nothing would be trained",
    "--pretrained=SMALLVOCAB": "--tokenizer: has 257 tokens, the weights in",
}
GENERATE = {
    "--prompt=hi": "--checkpoint: give a checkpoint to generate from, or --pretrained DIR",
    "--checkpoint=FILES/none.ckpt --prompt=hi": "--checkpoint: no file at FILES/none.ckpt",
    "--checkpoint=FILES/classifier.ckpt --prompt=hi": "--checkpoint: FILES/classifier.ckpt is not a language model's",
    "--checkpoint=TRAINED": "--prompt: is empty",
    "--checkpoint=TRAINED --prompt=hi --top-k=0": "--top-k: must be a positive integer",
    "--checkpoint=TRAINED --prompt=hi --temperature=0": "--temperature: must be a positive number",
    "--checkpoint=TRAINED --prompt=hi --output=out.csv": "--output: must end in .jsonl",
    "--checkpoint=TRAINED --prompt=LONG": "--prompt: is 40 tokens, the model's context is 32",
    "--checkpoint=TRAINED --prompt=hi --max-new-tokens=31": "--max-new-tokens: 31 after a 2-token prompt passes",
    "--pretrained=SMALLVOCAB --tokenizer=bytes --prompt=z": "--prompt: holds token 122, outside the model's vocabulary",
}


def test_every_bad_input_is_refused_in_one_line(files: Path, tmp_path: Path) -> None:
    from .test_language_model import hf_gpt2

    trained = tmp_path / "trained"
    result = run_script("train.py", *TINY, "--max-epochs=1", "--train-tokens=2000", f"--output-dir={trained}")
    assert result.returncode == 0, result.stderr[-3000:]
    hf_gpt2(tmp_path / "small-vocab", vocab_size=100)
    checkpoint = trained / "checkpoints" / "last.ckpt"
    tried, clean = 0, []
    for script, cases in (("train.py", TRAIN), ("generate.py", GENERATE)):
        for flags, expected in cases.items():
            args = case(
                files, flags.replace("TRAINED", str(checkpoint)).replace("SMALLVOCAB", str(tmp_path / "small-vocab"))
            )
            args = [a.replace("LONG", "x" * 40) for a in args]
            before = sorted(p.name for p in tmp_path.iterdir())
            output = tmp_path / "out"
            extra = [*TINY, f"--output-dir={output}"] if script == "train.py" else []
            result = run_script(script, *extra, *args)
            tried += 1
            lines = result.stderr.strip().splitlines()
            ok = (
                result.returncode == 2
                and len(lines) == 1
                and lines[0].startswith("error: ")
                and expected.replace("FILES", str(files)) in lines[0]
                and "Traceback" not in result.stdout + result.stderr
                and not output.exists()
                and sorted(p.name for p in tmp_path.iterdir()) == before
            )
            if not ok:
                clean.append(f"{script} {flags}: exit {result.returncode}: {result.stderr.strip()[-600:]}")
    print(f"{tried} tried, {tried - len(clean)} clean")
    assert not clean, "\n".join(clean)
