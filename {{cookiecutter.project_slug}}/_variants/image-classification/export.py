"""Export a checkpoint for serving: `python export.py --checkpoint CKPT --format {onnx,torch-export} [--output FILE]`.

The graph takes uint8 (N, 3, H, W) images of any batch and image size, and does the validation crop, normalisation and
the network; it gives one logit per class. It is checked against PyTorch before it is written.
"""

from {{ cookiecutter.package_name }}.commands.export import (
    cli,
    main,
)

__all__ = ["main"]

if __name__ == "__main__":
    cli()
