"""Export a checkpoint for transformers, vLLM or the Hub: `python export.py --checkpoint CKPT [--output DIR]`.

The folder holds model.safetensors, config.json and tokenizer.json, read back and checked against the checkpoint's
logits before it is put in place; `python generate.py --pretrained DIR` samples from it.
"""

from __future__ import annotations

from pathlib import Path

from {{ cookiecutter.package_name }}.engine import (
    ConfigError,
    PartialFolder,
    fail,
    parse_options,
)
from {{ cookiecutter.package_name }}.tasks.language_model.config import ExportOptions

DESCRIPTION = "Export a language model checkpoint of train.py as a Hugging Face GPT-2 folder. Defaults with reasons."


def main(argv: list[str] | None = None) -> float:
    opts = parse_options(argv, ExportOptions, prog="export.py", description=DESCRIPTION)
    from {{ cookiecutter.package_name }}.tasks.language_model.hf_export import (
        export_hf,
    )
    from {{ cookiecutter.package_name }}.tasks.language_model.sampling import (
        load_checkpoint,
    )

    checkpoint = Path(opts.checkpoint)
    folder = Path(opts.output) if opts.output else checkpoint.with_name(f"{checkpoint.stem}-hf")
    try:
        with PartialFolder(folder, "output") as out:  # checked before the checkpoint is read
            net, tokenizer = load_checkpoint(opts.checkpoint)
            diff = export_hf(net, tokenizer, out)
    except ConfigError as err:
        fail(str(err))
    except OSError as err:
        fail(f"--output: cannot write {folder} ({err.strerror or err}); give a writable place")
    print(
        f"exported {folder} (GPT-2: {net.layers} layers, {net.heads} heads, width {net.width}, context {net.context}, "
        f"{net.vocab_size} tokens): max |logit difference| read back {diff:.2e}"
    )
    return diff


def cli() -> None:
    """`export.py`, and the installed `<project>-export`."""
    from {{ cookiecutter.package_name }}.engine import run_stoppable, set_up_warnings

    set_up_warnings()
    run_stoppable(main, "export.py", "nothing written")
