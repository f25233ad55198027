"""Tokenize a text folder into LitData chunks of training sequences, in a local folder or at an s3:// URL, for
train.py --data streaming (give it the same --tokenizer and --context):

python prepare_data.py --data-dir my_texts/ --tokenizer tokenizer.json --context 1024 --output s3://bucket/text
python train.py --data streaming --data-dir s3://bucket/text --tokenizer tokenizer.json --context 1024
"""

from __future__ import annotations

from lightning_gpu_engine import ConfigError, fail, parse_options

from {{ cookiecutter.package_name }}.tasks.language_model.config import (
    PrepareOptions,
)


def main(argv: list[str] | None = None) -> dict[str, int]:
    opts = parse_options(argv, PrepareOptions, prog="prepare_data.py", description=__doc__ or "")
    # torch loads here, once the options are good
    from {{ cookiecutter.package_name }}.tasks.language_model.streaming import (
        prepare,
    )

    try:
        written = prepare(opts)
    except ConfigError as err:
        fail(str(err))
    except OSError as err:  # a full disk while writing: the partial folder is gone, the previous chunks kept
        fail(f"--output: cannot write {opts.output} ({err.strerror or err}); free space or give another place", code=1)
    print(f"wrote {', '.join(f'{n} {split}' for split, n in written.items())} sequences to {opts.output}", flush=True)
    return written


if __name__ == "__main__":
    main()
