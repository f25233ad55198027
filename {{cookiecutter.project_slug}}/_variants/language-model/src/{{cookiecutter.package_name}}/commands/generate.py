"""Continue a prompt with a trained checkpoint, or with Hugging Face GPT-2 weights as they are:

python generate.py --checkpoint outputs/checkpoints/last.ckpt --prompt "Once upon a time" --num-samples 3
python generate.py --pretrained gpt2/ --prompt "Hello" --top-k 1 --output samples.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

from lightning_gpu_engine import ConfigError, check_place, fail, parse_options

from {{ cookiecutter.package_name }}.tasks.language_model.config import GenerateOptions

DESCRIPTION = "Generate text with a checkpoint of train.py or GPT-2 weights. Every default is shown with its reason."


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    opts = parse_options(argv, GenerateOptions, prog="generate.py", description=DESCRIPTION)  # its files too
    try:  # where the output goes, before seconds of imports
        if opts.output is not None:
            check_place(Path(opts.output), "output")
    except ConfigError as err:
        fail(str(err))
    import torch
    from lightning_gpu_engine import commit, discard, open_output

    from {{ cookiecutter.package_name }}.tasks.language_model.sampling import (
        fit_new_tokens,
        load_checkpoint,
        load_pretrained,
        prompt_tokens,
        sample,
    )

    handle = None
    try:
        if opts.accelerator == "cuda" and not torch.cuda.is_available():
            raise ConfigError("accelerator", "cuda asked for, but no CUDA GPU is visible; use cpu or auto")
        # opened before the weights load: a folder, a missing or read-only place, another writer answer at once
        handle = open_output(opts.output, "output") if opts.output is not None else None
        if opts.checkpoint is not None:
            net, tokenizer = load_checkpoint(opts.checkpoint)
        else:
            net, tokenizer = load_pretrained(str(opts.pretrained), opts.tokenizer)
        prompt = prompt_tokens(opts, net, tokenizer)
        opts = fit_new_tokens(opts, net, prompt)
    except ConfigError as err:
        if handle is not None:
            discard(handle)
        fail(str(err))
    cuda = opts.accelerator == "cuda" or (opts.accelerator == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    records: list[dict[str, object]] = []
    try:
        samples = sample(net.to(device), prompt, opts, tokenizer.eot, device)
        for number, tokens in enumerate(samples, 1):
            text = tokenizer.decode(tokens)
            records.append({"prompt": opts.prompt, "text": text, "tokens": tokens})
            print(f"--- sample {number} ---\n{opts.prompt}{text}", flush=True)
        if handle is not None:
            handle.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            commit(handle, Path(opts.output or ""))
    except BaseException:  # a stop or a failure: no partial file stays
        if handle is not None:
            discard(handle)
        raise
    return records


def cli() -> None:
    """`generate.py`, and the installed `<project>-generate`."""
    from lightning_gpu_engine import run_stoppable

    run_stoppable(main, "generate.py", "nothing written")
