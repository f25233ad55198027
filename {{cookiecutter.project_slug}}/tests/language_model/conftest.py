"""The language model's tiny CPU setup: a 2-block model, sequences of 32 tokens, batches of 8 (tests/conftest.py
makes `tiny_args` of it)."""

from __future__ import annotations

# Pinned, not left to the bake's defaults: 16-mixed and fsdp need CUDA, and these tests must run on any CPU.
TINY = [
    "--accelerator=cpu",
    "--precision=32-true",
    "--strategy=auto",
    "--model=tiny",
    "--context=32",
    "--batch-size=8",
    "--train-tokens=20000",
    "--num-workers=0",
    "--logger=csv",
    "--log-every-n-steps=1",
]
# Each entry point's refusals of files its flags name, answered before torch and Lightning load: (script, its flags,
# what its one line says); {tmp}: an empty folder. tests/test_engine_use.py adds bench.py's and sweep.py's
MISSING_INPUTS = [
    ("train.py", ["--data=text", "--data-dir={tmp}"], "--data-dir: {tmp} holds no .txt or .jsonl files"),
    ("train.py", ["--data=tokens", "--data-dir={tmp}"], "--data-dir: {tmp} has no *train*.bin token shards"),
    ("train.py", ["--tokenizer={tmp}/none.json"], "--tokenizer: cannot read {tmp}/none.json"),
    ("generate.py", ["--checkpoint={tmp}/none.ckpt", "--prompt=hi"], "--checkpoint: no file at {tmp}/none.ckpt; give"),
    ("generate.py", ["--pretrained={tmp}/none", "--prompt=hi"], "--pretrained: cannot read {tmp}/none/config.json"),
    ("export.py", ["--checkpoint={tmp}/none.ckpt"], "--checkpoint: no file at {tmp}/none.ckpt; give a .ckpt"),
    ("train_tokenizer.py", ["--data-dir={tmp}/none", "--output={tmp}/t.json"], "--data-dir: {tmp}/none is not a"),
    ("prepare_data.py", ["--data-dir={tmp}", "--output={tmp}/c"], "--data-dir: {tmp} holds no .txt or .jsonl files"),
    ("prepare_data.py", ["--tokenizer={tmp}/none.json", "--output={tmp}/c"], "--tokenizer: cannot read {tmp}/none"),
]
