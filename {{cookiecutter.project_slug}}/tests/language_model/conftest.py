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
# train.py's refusals of files its flags name, answered before torch and Lightning load ({tmp}: an empty folder)
MISSING_INPUTS = [
    (["--data=text", "--data-dir={tmp}"], "--data-dir: {tmp} holds no .txt or .jsonl files"),
    (["--data=tokens", "--data-dir={tmp}"], "--data-dir: {tmp} has no *train*.bin token shards"),
    (["--tokenizer={tmp}/none.json"], "--tokenizer: cannot read {tmp}/none.json"),
]
