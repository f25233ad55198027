"""Export a checkpoint for transformers, vLLM or the Hub: `python export.py --checkpoint CKPT [--output DIR]`.

The folder holds model.safetensors, config.json and tokenizer.json, read back and checked against the checkpoint's
logits before it is put in place; `python generate.py --pretrained DIR` samples from it.
"""

from {{ cookiecutter.package_name }}.commands.export import (
    cli,
    main,
)

__all__ = ["main"]

if __name__ == "__main__":
    cli()
