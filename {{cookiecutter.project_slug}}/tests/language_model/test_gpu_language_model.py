"""On a CUDA GPU, the language model's speed features are in effect, not merely training: flash or cuDNN attention
kernels, bf16 matmuls, one compiled graph per shape, FSDP2 on one GPU with checkpoints that load on the CPU, and
generation that agrees with the CPU's. Each skips, with the reason, without a GPU; none has a CPU twin that could
pass while its GPU form is broken."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from conftest import run_script, run_train
from lightning_gpu_engine import Config, build_trainer, resolve_hardware
from torch.profiler import ProfilerActivity, profile

from {{ cookiecutter.package_name }}.tasks.language_model import (
    TASK,
    build_data,
    build_model,
)
from {{ cookiecutter.package_name }}.tasks.language_model.config import (
    GenerateOptions,
    LanguageOptions,
)
from {{ cookiecutter.package_name }}.tasks.language_model.gpt import GPT
from {{ cookiecutter.package_name }}.tasks.language_model.sampling import (
    load_checkpoint,
    sample,
)

from .conftest import TINY

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
GPU = ["--accelerator=cuda", "--precision=bf16-mixed"]


def test_attention_runs_a_flash_or_cudnn_kernel() -> None:
    net = GPT(vocab_size=257, layers=2, heads=4, width=256, context=512).cuda()
    tokens = torch.randint(0, 257, (4, 512), device="cuda")
    with torch.autocast("cuda", torch.bfloat16), profile(activities=[ProfilerActivity.CUDA]) as trace:
        net(tokens).float().sum().backward()
        torch.cuda.synchronize()
    kernels = [event.name for event in trace.events() if event.device_type.name == "CUDA"]
    fused = [k for k in kernels if re.search(r"flash|fmha|cudnn.*(sdpa|attn|fprop)", k, re.IGNORECASE)]
    assert fused, f"no flash or cuDNN attention kernel among: {sorted(set(kernels))[:40]}"


class Probe(L.Callback):
    """Graphs compiled by the end of each epoch, and the dtype of a block's matmul output in training."""

    def __init__(self) -> None:
        self.graphs: list[int] = []
        self.dtypes: set[torch.dtype] = set()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        fc = pl_module.net.h[0].mlp.c_fc  # type: ignore[union-attr, index]
        fc.register_forward_hook(lambda module, args, out: self.dtypes.add(out.dtype) if module.training else None)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from torch._dynamo.utils import counters

        self.graphs.append(int(counters["stats"]["unique_graphs"]))


def test_bf16_is_in_effect_and_nothing_compiles_again_after_the_first_epoch(tmp_path: Path) -> None:
    # 21,000 tokens: the validation set ends in a smaller batch, a shape of its own, compiled in the first epoch
    cfg = Config(accelerator="cuda", devices="1", precision="auto", compile=True, batch_size=8, max_epochs=3)
    cfg.output_dir, cfg.logger = str(tmp_path), "csv"
    opts = LanguageOptions(model="tiny", context=64, train_tokens=21_000)
    hw = resolve_hardware(cfg, fsdp2=True)
    assert hw.precision == "bf16-mixed" and hw.compile
    data = build_data(cfg, opts, hw)
    model = build_model(cfg, opts, hw, data)
    probe = Probe()
    trainer = build_trainer(cfg, hw, task=TASK)
    trainer.callbacks.append(probe)  # type: ignore[attr-defined]
    trainer.fit(model, datamodule=data)
    assert probe.dtypes == {torch.bfloat16}
    assert probe.graphs[1] > 0 and probe.graphs[1:] == [probe.graphs[1]] * 2, probe.graphs


def test_fsdp_on_one_gpu_trains_resumes_and_its_checkpoint_generates_on_a_cpu(
    tiny_args: list[str], tmp_path: Path
) -> None:
    args = [*tiny_args, *GPU, "--strategy=fsdp", "--devices=1", "--activation-checkpointing"]
    first = run_train(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "FSDP2: 2 blocks and the rest sharded over 1 processes, activations recomputed" in first.stdout
    resumed = run_train(*args, "--max-epochs=2", "--resume=last")
    assert resumed.returncode == 0 and "epoch 2/2 done" in resumed.stdout, resumed.stderr[-3000:]
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    out = tmp_path / "cpu.jsonl"
    generated = run_script(
        "generate.py", "--checkpoint", str(checkpoint), "--prompt=ab", "--accelerator=cpu", f"--output={out}"
    )
    assert generated.returncode == 0, generated.stderr[-3000:]
    assert json.loads(out.read_text())["tokens"]


def test_gpu_generation_agrees_with_the_cpu_within_bf16_tolerance(tmp_path: Path) -> None:
    trained = run_train(*TINY, "--max-epochs=2", "--train-tokens=100000", f"--output-dir={tmp_path}")
    assert trained.returncode == 0, trained.stderr[-3000:]
    net, tokenizer = load_checkpoint(str(tmp_path / "checkpoints" / "last.ckpt"))
    prompt = tokenizer.encode("ab")
    options: dict[str, Any] = {"prompt": "ab", "checkpoint": "x.ckpt", "max_new_tokens": 16, "top_k": 1}
    on_cpu = sample(net, prompt, GenerateOptions(**options, precision="32"), tokenizer.eot, torch.device("cpu"))[0]
    gpu = torch.device("cuda")
    on_gpu = sample(net.to(gpu), prompt, GenerateOptions(**options, precision="bf16"), tokenizer.eot, gpu)[0]
    assert on_gpu[:4] == on_cpu[:4]  # a trained model is sure of its next tokens: bf16 rounding cannot flip them
    sequence = torch.tensor([prompt + on_cpu])
    with torch.no_grad():
        expected = net.cpu().float()(sequence)
        with torch.autocast("cuda", torch.bfloat16):
            got = net.to(gpu)(sequence.to(gpu)).float().cpu()
    torch.testing.assert_close(got, expected, atol=0.15, rtol=0.02)


def test_muon_steps_with_a_fused_adamw_for_the_rest_and_clips_in_bf16(tiny_args: list[str], tmp_path: Path) -> None:
    done = run_train(*tiny_args, *GPU, "--optimizer=muon", "--max-steps=20", "--val-every=10")
    assert done.returncode == 0, done.stderr[-3000:]
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    groups = saved["optimizer_states"][0]["param_groups"]
    assert any("ns_steps" in g for g in groups), "Muon holds the hidden matrices"
    assert {g["fused"] for g in groups if "betas" in g} == {True}, "AdamW's part is one fused kernel on CUDA"
    losses = [json.loads(line)["val/loss"] for line in (tmp_path / "run" / "validation.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and losses[1] < losses[0] < 5.6, losses  # from ln(257) = 5.55 down, gradients clipped at 1
