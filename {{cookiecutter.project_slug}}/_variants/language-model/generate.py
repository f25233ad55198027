"""Continue a prompt with a trained checkpoint, or with Hugging Face GPT-2 weights as they are:

python generate.py --checkpoint outputs/checkpoints/last.ckpt --prompt "Once upon a time" --num-samples 3
python generate.py --pretrained gpt2/ --prompt "Hello" --top-k 1 --output samples.jsonl
"""

from {{ cookiecutter.package_name }}.commands.generate import (
    cli,
    main,
)

__all__ = ["main"]

if __name__ == "__main__":
    cli()
