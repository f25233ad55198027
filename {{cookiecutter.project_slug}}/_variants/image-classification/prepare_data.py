"""Write an image folder into LitData chunks, in a local folder or at an s3:// URL, for train.py --data streaming:

python prepare_data.py --data-dir data/ --output s3://bucket/images
python train.py --data streaming --data-dir s3://bucket/images
"""

from __future__ import annotations

from lightning_gpu_engine import ConfigError, fail, parse_options

from {{ cookiecutter.package_name }}.tasks.image_classification.config import (
    PrepareOptions,
)


def main(argv: list[str] | None = None) -> dict[str, int]:
    opts = parse_options(argv, PrepareOptions, prog="prepare_data.py", description=__doc__ or "")
    # torch loads here, once the options are good
    from {{ cookiecutter.package_name }}.tasks.image_classification.streaming import (
        prepare,
    )

    try:
        written = prepare(opts)
    except ConfigError as err:
        fail(str(err))
    except OSError as err:  # a full disk while writing: the partial folder is gone, the previous chunks kept
        fail(f"--output: cannot write {opts.output} ({err.strerror or err}); free space or give another place", code=1)
    print(f"wrote {', '.join(f'{n} {split}' for split, n in written.items())} images to {opts.output}", flush=True)
    return written


if __name__ == "__main__":
    main()
