"""Export a checkpoint for serving: `python export.py --checkpoint CKPT --format {onnx,torch-export} [--output FILE]`.

The graph takes uint8 (N, 3, H, W) images of any batch and image size, and does the validation crop, normalisation and
the network; it gives one logit per class. It is checked against PyTorch before it is written.
"""

from __future__ import annotations

import importlib

from {{ cookiecutter.package_name }}.engine import (
    ConfigError,
    discard,
    fail,
    parse_options,
)
from {{ cookiecutter.package_name }}.tasks.image_classification.config import (
    ExportConfig,
)

DESCRIPTION = "Export a checkpoint of train.py as one graph, checked against PyTorch. Defaults shown with reasons."


def check_onnx_installed() -> None:
    """Before torch is imported, so that a missing optional extra answers at once."""
    for name in ("onnxruntime", "onnx", "onnxscript"):
        try:
            importlib.import_module(name)
        except ImportError:
            extra = 'pip install -e ".[export]", or use --format torch-export'
            fail(f"--format: onnx needs onnx, onnxscript and onnxruntime ({name} is not installed): {extra}")


def main(argv: list[str] | None = None) -> dict[str, float]:
    cfg = parse_options(argv, ExportConfig, prog="export.py", description=DESCRIPTION)
    if cfg.format == "onnx":
        check_onnx_installed()
    from {{ cookiecutter.package_name }}.tasks.image_classification.export import (
        ParityError,
        ServingModel,
        export,
        open_export,
    )
    from {{ cookiecutter.package_name }}.tasks.image_classification.predict import (
        load_classifier,
    )

    try:
        lock = open_export(cfg)  # a bad --output answers before minutes of exporting
    except ConfigError as err:
        fail(str(err))
    try:
        # Plain fp32, NCHW, eager: what every runtime reads; the runtime picks its own kernels and layout.
        classifier = load_classifier(cfg.checkpoint, channels_last=False, compile=False)
        path, diff, bound = export(cfg, ServingModel(classifier), lock)
    except ConfigError as err:
        fail(str(err))
    except ParityError as err:
        fail(f"--format: {err}", code=1)
    except OSError as err:
        fail(f"--output: cannot write {cfg.output or 'beside the checkpoint'} ({err.strerror}); give a writable place")
    except Exception as err:  # the exporter cannot trace some network: one line, the exporter's own first line
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        fail(f"--format: the {cfg.format} export failed ({type(err).__name__}: {reason}); try the other format", code=1)
    finally:  # a checkpoint that does not load, a stop: the partial file goes (export() removes it once it runs)
        discard(lock)
    size = path.stat().st_size
    classes = len(classifier.hparams["class_names"])
    print(
        f"exported {path} ({size / 2**20:.1f} MiB, {cfg.format}): uint8 (N, 3, H, W) in, {classes} logits out; "
        f"max |difference| from PyTorch {diff:.2e} (tolerance {bound:.1e}) at batch sizes 1, 2 and 5"
    )
    return {"max_diff": diff, "bytes": float(size)}


def cli() -> None:
    """`export.py`, and the installed `<project>-export`."""
    from {{ cookiecutter.package_name }}.engine import run_stoppable, set_up_warnings

    set_up_warnings()
    run_stoppable(main, "export.py", "nothing written")
