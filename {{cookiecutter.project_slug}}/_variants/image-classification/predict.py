"""Label images with a trained checkpoint: `python predict.py --checkpoint CKPT INPUT... [--output predictions.csv]`.

INPUT is an image, a folder (searched recursively) or a text file of paths. It runs through the same Trainer and
resolved hardware as train.py, with the validation decoding and crop; the checkpoint carries classes and preprocessing.
"""

from {{ cookiecutter.package_name }}.commands.predict import (
    cli,
    main,
)

__all__ = ["main"]

if __name__ == "__main__":
    cli()
