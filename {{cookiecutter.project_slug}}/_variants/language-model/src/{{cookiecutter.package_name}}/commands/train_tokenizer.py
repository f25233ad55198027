"""Learn a byte-level BPE tokenizer (GPT-2's scheme) from your own text, offline, for train.py's --tokenizer:

python train_tokenizer.py --data-dir my_texts/ --vocab-size 8192 --output tokenizer.json
python train.py --data text --data-dir my_texts/ --tokenizer tokenizer.json
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lightning_gpu_engine import (
    ConfigError,
    check_path,
    commit,
    discard,
    fail,
    open_output,
    opt,
    parse_options,
)


@dataclass
class TokenizerOptions:
    data_dir: str = opt("data", "the folder of .txt/.jsonl files (as train.py --data text reads them)")
    vocab_size: int = opt(8192, "tokens, end-of-text included; GPT-2 has 50257")
    output: str = opt("tokenizer.json", "the Hugging Face tokenizer.json to write")

    def __post_init__(self) -> None:
        for name in ("data_dir", "output"):
            check_path(name, getattr(self, name))
        if not 257 <= self.vocab_size <= 1 << 20:
            # 256 byte values and end-of-text come first; merges follow
            raise ConfigError("vocab_size", f"must be from 257 to {1 << 20}, got {self.vocab_size}")
        if not self.output.endswith(".json"):
            raise ConfigError("output", f"must end in .json, got {self.output!r}")

    def check_inputs(self) -> None:
        from {{ cookiecutter.package_name }}.tasks.language_model.shards import (
            text_files,
        )

        text_files(Path(self.data_dir))


def main(argv: list[str] | None = None) -> None:
    opts = parse_options(argv, TokenizerOptions, prog="train_tokenizer.py", description=__doc__ or "")
    from {{ cookiecutter.package_name }}.tasks.language_model.shards import (
        documents,
        text_files,
    )
    from {{ cookiecutter.package_name }}.tasks.language_model.tokenizer import (
        train_bpe,
    )

    handle = None
    try:
        files = text_files(Path(opts.data_dir))
        handle = open_output(opts.output, "output")  # before the training: a place that cannot take it answers now
        tokenizer = train_bpe((doc for path in files for doc in documents(path)), opts.vocab_size)
        handle.write(tokenizer.spec)
        commit(handle, opts.output)
    except ConfigError as err:
        if handle is not None:
            discard(handle)
        fail(str(err))
    except BaseException:
        if handle is not None:
            discard(handle)
        raise
    print(f"{opts.output}: {tokenizer.vocab_size} tokens learnt from {len(files)} files")


def cli() -> None:
    """`train_tokenizer.py`, and the installed `<project>-train-tokenizer`."""
    from lightning_gpu_engine import run_stoppable

    run_stoppable(main, "train_tokenizer.py", "nothing written")
