"""Language modelling: a GPT-2-architecture transformer trained to predict the next token, on a synthetic language with
a known entropy floor, your text files, or token shards made by llm.c or nanoGPT.

`TASK` is what train.py hands the engine; generate.py and train_tokenizer.py use this folder's modules directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_gpu_engine import AFRESH, Config, ConfigError, Task, TaskDefault, saved_record

from .config import LanguageOptions
from .inputs import check_inputs, run_tokenizer
from .tokenizer import Tokenizer

if TYPE_CHECKING:  # torch and Lightning load only once the options are known to be good
    from lightning_gpu_engine import Hardware

    from .data import LanguageDataModule
    from .module import LanguageModel


def build_data(cfg: Config, opts: LanguageOptions, hw: Hardware) -> LanguageDataModule:
    from .data import LanguageDataModule

    return LanguageDataModule(
        tokenizer=run_tokenizer(opts),
        data=opts.data,
        data_dir=opts.data_dir,
        context=opts.context,
        batch_size=cfg.batch_size,
        train_tokens=opts.train_tokens,
        val_fraction=opts.val_fraction,
        seed=cfg.seed,
        num_workers=hw.num_workers,
        pin_memory=hw.pin_memory,
        cache_dir=opts.cache_dir,
    )


def build_model(cfg: Config, opts: LanguageOptions, hw: Hardware, datamodule: Any) -> LanguageModel:
    from lightning_gpu_engine import check_enough_data

    from .module import LanguageModel

    model = LanguageModel.from_config(cfg, opts, hw, datamodule.tokenizer)
    datamodule.prepare_data()  # text: tokenized now, so a folder too small for one batch fails before training
    check_enough_data(datamodule, cfg.batch_size, hw.world_size, f"sequences of {opts.context + 1} tokens")
    return model


def check_resume(checkpoint: dict[str, Any], cfg: Config, opts: LanguageOptions, datamodule: Any) -> list[str]:
    """The same tokenizer, and from a folder the same number of training sequences (the epoch's order follows it)."""
    from .module import TOKENIZER

    if checkpoint.get(TOKENIZER, datamodule.tokenizer.spec) != datamodule.tokenizer.spec:
        saved = Tokenizer(checkpoint[TOKENIZER]).name
        raise ConfigError(
            "tokenizer",
            f"the checkpoint was trained with {saved}, not {datamodule.tokenizer.name}: its embeddings are for those "
            f"tokens; resume with that tokenizer, {AFRESH}",
        )
    record = saved_record(checkpoint)
    if opts.data != "synthetic" and record.get("train_items") is not None:
        datamodule.prepare_data()
        datamodule.setup("fit")
        sequences = len(datamodule.splits["train"])
        if sequences != record["train_items"]:
            raise ConfigError(
                "data_dir",
                f"the checkpoint was trained on {record['train_items']} training sequences, not {sequences}; the "
                f"epoch's order and length follow them: resume with the same data, {AFRESH}",
            )
    return []


def summary(datamodule: Any) -> str:
    """The synthetic language's floor, beside the loss on the summary line."""
    return f"floor={datamodule.floor:.4f}" if getattr(datamodule, "floor", None) is not None else ""


# The options only some --data sources read, and those sources: config.yaml leaves out what the run's data did not read
DATA_OPTIONS = {
    "data_dir": ("text", "tokens", "streaming"),
    "train_tokens": ("synthetic",),
    "val_fraction": ("text",),
    "cache_dir": ("streaming",),
}


def unused_options(opts: Any) -> list[str]:
    return [name for name, sources in DATA_OPTIONS.items() if opts.data not in sources]


# GPT-2's recipe for the engine's optimizer options: nanoGPT's and llm.c's, with which both train GPT-2 124M
SOURCES = "nanoGPT's train.py, llm.c's train_gpt2"
GPT2_RECIPE = {
    "lr": TaskDefault(6e-4, f"GPT-2 124M's peak rate ({SOURCES}: run_gpt2_124M.sh -l 0.0006)"),
    "weight_decay": TaskDefault(0.1, f"GPT-2's ({SOURCES}: run_gpt2_124M.sh -c 0.1)"),
    "betas": TaskDefault("0.9,0.95", f"GPT-2's: beta2 0.95 forgets a gradient spike sooner than 0.999 ({SOURCES})"),
    "gradient_clip_val": TaskDefault(
        1.0, f"GPT-2's: a rare huge gradient enters AdamW's averages at norm 1 at most ({SOURCES})"
    ),
}

# This project's answers to the template's questions: where its runs start, before configs/ and the flags
ANSWERS = {
    "precision": "{{ cookiecutter.precision }}",
    "strategy": "{{ cookiecutter.strategy }}",
    "compile": {{ "None" if cookiecutter.compile == "yes" else "False" }},
    "logger": "{{ cookiecutter.logger }}",
}

TASK = Task(
    name="the language model",
    options=LanguageOptions,
    build_data=build_data,
    build_model=build_model,
    monitor="val/loss",
    mode="min",
    batch_size_fn=lambda batch: int(batch[0].numel()),  # tokens: throughput and MFU are per token
    unit="tokens",
    fsdp2=True,  # --strategy fsdp: fully_shard per transformer block (the engine's trainer/sharding.py)
    refused_on_resume={
        "model": "its weights are for that size",
        "n_layer": "its weights are for that many blocks",
        "n_head": "its attention weights are split into that many heads",
        "n_embd": "its weights are for that width",
        "context": "its position embeddings and the packing of the sequences follow it",
        "data": "its tokens come from that source",
        "tokenizer": "its embeddings are for that tokenizer's tokens",
        "pretrained": "it set the starting weights and the network's shape",
        "train_tokens": "the synthetic stream and the epoch's length follow it",
        "val_fraction": "it moved tokens between training and validation",
    },
    honoured_on_resume={"dropout": "applies from the next step"},
    # data_dir: checked by check_resume (the same number of training sequences); cache_dir: where an index is kept
    free_on_resume=("data_dir", "cache_dir"),
    check_resume=check_resume,
    check_inputs=check_inputs,
    unused_options=unused_options,
    summary=summary,
    defaults={**ANSWERS, **GPT2_RECIPE},
)
