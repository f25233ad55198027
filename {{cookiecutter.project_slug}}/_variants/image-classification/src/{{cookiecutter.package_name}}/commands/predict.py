"""Label images with a trained checkpoint: `python predict.py --checkpoint CKPT INPUT... [--output predictions.csv]`.

INPUT is an image, a folder (searched recursively) or a text file of paths. It runs through the same Trainer and
resolved hardware as train.py, with the validation decoding and crop; the checkpoint carries classes and preprocessing.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from lightning_gpu_engine import ConfigError, fail, parse_options

from {{ cookiecutter.package_name }}.tasks.image_classification.config import (
    PredictConfig,
)

DESCRIPTION = "Label images with a checkpoint of train.py. Every default is shown with its reason."


def gather(trainer: Any, batches: list[Any]) -> dict[int, tuple[list[float], list[int]]]:
    """Every rank's predictions, keyed by input index: an image predicted twice counts once, none is lost."""
    import torch.distributed as dist

    local = [(i.tolist(), p.tolist(), c.tolist()) for i, p, c in batches]
    parts: list[Any] = [local]
    if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, local)
    return {
        i: (p, c) for part in parts for index, probs, ids in part for i, p, c in zip(index, probs, ids, strict=True)
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    cfg = parse_options(argv, PredictConfig, prog="predict.py", description=DESCRIPTION)
    from lightning_gpu_engine import (
        apply_backend_flags,
        build_trainer,
        commit,
        discard,
        launched_as_global_zero,
        open_output,
        resolve_hardware,
    )

    from {{ cookiecutter.package_name }}.tasks.image_classification.decoding import (
        UnreadableImageError,
        decode_choice,
    )
    from {{ cookiecutter.package_name }}.tasks.image_classification.predict import (
        InputError,
        Predictor,
        collect_images,
        load_classifier,
        predict_loader,
        summary,
        write_rows,
    )

    try:
        paths = collect_images(cfg.inputs)
    except InputError as err:
        fail(f"INPUT: {err}")
    train_cfg = cfg.training_config()
    handle = None
    try:
        hw = resolve_hardware(train_cfg, channels_last=True)
        decode = decode_choice(cfg.decode, hw.accelerator, images=paths)  # auto: gpu for mostly JPEGs on CUDA
        hw = replace(hw, choices={"decode": decode})
        # before the checkpoint is read and the Trainer starts; only the process that writes
        handle = open_output(cfg.output, "output") if launched_as_global_zero() else None
        classifier = load_classifier(
            cfg.checkpoint, channels_last=hw.channels_last, compile=hw.compile, compile_mode=cfg.compile_mode
        )
        trainer = build_trainer(
            train_cfg, hw, callbacks=[], logger=False, enable_checkpointing=False, enable_model_summary=False
        )
    except ConfigError as err:
        if handle is not None:
            discard(handle)
        fail(str(err))
    apply_backend_flags(train_cfg)
    class_names = list(classifier.hparams["class_names"])
    loader = predict_loader(paths, classifier.hparams, hw, cfg.batch_size)  # validation's decoding, per --decode
    if trainer.is_global_zero:
        print(hw.summary())
    started = time.perf_counter()
    try:
        predictor = Predictor(classifier, cfg.top_k, paths)
        batches = trainer.predict(predictor, dataloaders=loader, return_predictions=True)
        found = gather(trainer, batches or [])
        if not found:  # every file was unreadable, found out only when decoding on the device
            raise UnreadableImageError(f"none of the {len(paths)} images can be read")
    except UnreadableImageError:
        if handle is not None:
            discard(handle)
        fail(f"INPUT: none of the {len(paths)} images can be read")
    except BaseException:
        if handle is not None:
            discard(handle)
        raise
    seconds = time.perf_counter() - started
    if handle is None:  # not rank 0: rank 0 writes everything
        return {}
    skipped = len(paths) - len(found)  # each was named in a warning when the loader met it
    rows = [(str(paths[i]), [(class_names[c], p) for p, c in zip(*found[i], strict=True)]) for i in sorted(found)]
    write_rows(handle, rows, jsonl=cfg.output.endswith(".jsonl"))
    commit(handle, cfg.output)
    print(summary(rows, skipped, seconds, cfg.output))
    return {"images": len(rows), "skipped": skipped, "images_per_sec": len(rows) / max(seconds, 1e-9)}


def cli() -> None:
    """`predict.py`, and the installed `<project>-predict`."""
    from lightning_gpu_engine import run_stoppable, set_up_warnings

    set_up_warnings()
    # Lightning's SIGTERM handler for predict only takes note, then calls the one it found: ours, which stops.
    run_stoppable(main, "predict.py", "no output written")
