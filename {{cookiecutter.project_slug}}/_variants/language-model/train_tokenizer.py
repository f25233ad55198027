"""Learn a byte-level BPE tokenizer (GPT-2's scheme) from your own text, offline, for train.py's --tokenizer:

python train_tokenizer.py --data-dir my_texts/ --vocab-size 8192 --output tokenizer.json
python train.py --data text --data-dir my_texts/ --tokenizer tokenizer.json
"""

from {{ cookiecutter.package_name }}.commands.train_tokenizer import (
    cli,
    main,
)

__all__ = ["main"]

if __name__ == "__main__":
    cli()
