"""Image classification: a torchvision or timm network on synthetic shapes, CIFAR-10 or your folders of images.

`TASK` is what train.py hands the engine; predict.py, export.py and bench.py use this folder's modules directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_gpu_engine import AFRESH, SCHEDULE, Config, ConfigError, Task, saved_record

from .config import ImageOptions
from .inputs import check_inputs

if TYPE_CHECKING:  # torch, torchvision and timm load only once the options are known to be good
    from lightning_gpu_engine import Hardware

    from .data import ImageDataModule
    from .module import ImageClassifier


def resolve(cfg: Config, opts: ImageOptions, hw: Hardware) -> dict[str, str]:
    from .decoding import decode_choice

    return {"decode": decode_choice(opts.decode, hw.accelerator, opts.data, opts.data_dir)}


def build_data(cfg: Config, opts: ImageOptions, hw: Hardware) -> ImageDataModule:
    from .data import ImageDataModule

    return ImageDataModule(
        data=opts.data,
        data_dir=opts.data_dir,
        image_size=opts.image_size,
        batch_size=cfg.batch_size,
        num_workers=hw.num_workers,
        pin_memory=hw.pin_memory,
        channels_last=bool(hw.channels_last),
        train_samples=opts.train_samples,
        seed=cfg.seed,
        decode=hw.choices.get("decode", "cpu"),
        cache_dir=opts.cache_dir,
    )


def build_model(cfg: Config, opts: ImageOptions, hw: Hardware, datamodule: Any) -> ImageClassifier:
    from lightning_gpu_engine import check_enough_data

    from .module import ImageClassifier

    model = ImageClassifier.from_config(cfg, opts, hw, datamodule.classes)
    datamodule.crop_pct = float(model.hparams.get("crop_pct", datamodule.crop_pct))  # eval crop = the model's
    if opts.data != "cifar10":  # cifar10 (45,000 images) may not be downloaded yet
        check_enough_data(datamodule, cfg.batch_size, hw.world_size, "images")
    return model


def check_resume(checkpoint: dict[str, Any], cfg: Config, opts: ImageOptions, datamodule: Any) -> list[str]:
    """The same classes in the same order, and for folders the same number of training images; for synthetic data
    the same --train-samples."""
    record = saved_record(checkpoint)
    if opts.data == "synthetic" and record.get("train_samples", opts.train_samples) != opts.train_samples:
        before = record["train_samples"]
        raise ConfigError(
            "train_samples",
            f"the checkpoint was trained with {before}, not {opts.train_samples}; the synthetic images and the "
            f"epoch's length follow it: resume with --train-samples {before}, {AFRESH}",
        )
    classes = list(datamodule.classes)
    saved_classes = list((checkpoint.get("hyper_parameters") or {}).get("class_names", classes))
    if saved_classes != classes:
        raise ConfigError(
            "data_dir",
            f"the checkpoint was trained with the classes {', '.join(saved_classes)}, not {', '.join(classes)}; "
            f"its outputs are those classes in that order: resume with the data it was trained on, {AFRESH}",
        )
    images = len(datamodule.samples["train"][0]) if opts.data == "folder" else None
    if opts.data == "streaming":
        images = datamodule.made_by["items"]["train"]
    if images is not None and record.get("train_items", images) != images:
        raise ConfigError(
            "data_dir",
            f"the checkpoint was trained with {record['train_items']} training images, not {images}; the "
            f"epoch's order and length follow them: resume with the same images, {AFRESH}",
        )
    return []


# The options only some --data sources read, and those sources: config.yaml leaves out what the run's data did not read
DATA_OPTIONS = {
    "data_dir": ("cifar10", "folder", "streaming"),
    "train_samples": ("synthetic",),
    "decode": ("folder", "streaming"),
    "cache_dir": ("streaming",),
}


def unused_options(opts: Any) -> list[str]:
    return [name for name, sources in DATA_OPTIONS.items() if opts.data not in sources]


# This project's answers to the template's questions: where its runs start, before configs/ and the flags
ANSWERS = {
    "precision": "{{ cookiecutter.precision }}",
    "strategy": "{{ cookiecutter.strategy }}",
    "compile": {{ "None" if cookiecutter.compile == "yes" else "False" }},
    "logger": "{{ cookiecutter.logger }}",
    "channels_last": {{ "None" if cookiecutter.channels_last == "yes" else "False" }},
}

TASK = Task(
    name="the image classifier",
    options=ImageOptions,
    build_data=build_data,
    build_model=build_model,
    monitor="val/acc",
    mode="max",
    unit="images",
    channels_last=True,  # convolutional networks: the engine converts them and their inputs to NHWC
    resolve=resolve,
    refused_on_resume={
        "model": "its weights are for that network",
        "image_size": "its weights and BatchNorm statistics were learned at that size",
        "pretrained": "it set the network's stem and the fine-tuning recipe",
        "data": "its classes and images come from that source",
    },
    honoured_on_resume={"backbone_lr_scale": SCHEDULE, "freeze_epochs": SCHEDULE},
    # data_dir and train_samples: checked by check_resume; decode, cache_dir: where images are decoded and the
    # streamed index is kept, not what is learned
    free_on_resume=("data_dir", "train_samples", "decode", "cache_dir"),
    check_resume=check_resume,
    check_inputs=check_inputs,
    unused_options=unused_options,
    defaults=ANSWERS,
)
