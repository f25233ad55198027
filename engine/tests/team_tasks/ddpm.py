"""A denoising diffusion model in the shape of DDPM's Lightning trainers (latent-diffusion's DDPM and its LitEma),
written from the guide's "Any LightningModule" alone: an average of the denoiser's weights that the module keeps
itself, as buffers, with a count of its updates, updated in its own `on_train_batch_end` and validated; its own AdamW
with a cosine schedule stepped every step; and two validation loaders (the average's denoising loss on held-out points,
and how far from the data the points it samples from noise land). It learns points on a ring: `python ddpm.py`."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_gpu_engine import ConfigError, Task, eval_loader, opt, train, train_loader

OWN_ADAMW = "the diffusion model's AdamW and per-step cosine are its own (configure_optimizers)"
OWN_EMA = "the diffusion model keeps its own average of the weights (on_train_batch_end)"


@dataclass
class DiffusionOptions:
    hidden: int = opt(64, "width of the denoiser's hidden layers")
    samples: int = opt(1024, "points on the ring to learn from; validation and test get a quarter each")
    timesteps: int = opt(50, "noise levels of the forward process; sampling walks back through every one")
    ema_rate: float = opt(0.995, "the average's old weight per step (after a warm-up): it spans about 1/(1-rate) steps")

    def __post_init__(self) -> None:
        for name in ("hidden", "samples", "timesteps"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be a positive integer, got {getattr(self, name)}")
        if not 0 <= self.ema_rate < 1:
            raise ConfigError("ema_rate", f"must be in [0, 1), got {self.ema_rate}")


class RingPoints(L.LightningDataModule):
    def __init__(self, samples: int, batch_size: int, seed: int, num_workers: int, pin_memory: bool) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        hp = self.hparams
        generator = torch.Generator().manual_seed(hp["seed"])

        def ring(n: int) -> TensorDataset:
            angle = 2 * math.pi * torch.rand(n, generator=generator)
            points = torch.stack([angle.cos(), angle.sin()], dim=1)
            return TensorDataset(points + 0.05 * torch.randn(n, 2, generator=generator))

        quarter = hp["samples"] // 4
        self.splits = {"train": ring(hp["samples"]), "val": ring(quarter), "test": ring(quarter)}
        self.splits["noise"] = TensorDataset(torch.randn(quarter, 2, generator=generator))  # where sampling starts

    def train_dataloader(self) -> DataLoader[Any]:
        hp = self.hparams
        return train_loader(self.splits["train"], hp["batch_size"], hp["seed"], hp["num_workers"], hp["pin_memory"])

    def evaluation(self, split: str) -> list[DataLoader[Any]]:
        hp = self.hparams
        splits = (self.splits[split], self.splits["noise"])
        return [eval_loader(s, hp["batch_size"], hp["num_workers"], hp["pin_memory"]) for s in splits]

    def val_dataloader(self) -> list[DataLoader[Any]]:
        return self.evaluation("val")

    def test_dataloader(self) -> list[DataLoader[Any]]:
        return self.evaluation("test")


class Denoiser(nn.Module):
    """The noise in a noised point, given the point and its noise level."""

    def __init__(self, hidden: int, timesteps: int) -> None:
        super().__init__()
        self.point = nn.Linear(2, hidden)
        self.level = nn.Embedding(timesteps, hidden)
        self.head = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 2))

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        return self.head(self.point(x) + self.level(t))


def frozen_copy(net: nn.Module) -> nn.Module:
    """`net` again, its weights buffers: saved with the module, out of every optimizer's and DDP's reach."""
    copied = copy.deepcopy(net)
    for module in copied.modules():
        for name, weight in list(module._parameters.items()):
            del module._parameters[name]
            module.register_buffer(name, None if weight is None else weight.detach().clone())
    return copied


class DDPM(L.LightningModule):
    def __init__(self, hidden: int, timesteps: int, ema_rate: float, lr: float) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = Denoiser(hidden, timesteps)
        self.ema = frozen_copy(self.net)  # what validation, the test and sampling use
        self.register_buffer("ema_updates", torch.zeros((), dtype=torch.long))
        betas = torch.linspace(1e-4, 0.2, timesteps)
        self.register_buffer("betas", betas)
        self.register_buffer("alpha_bars", torch.cumprod(1 - betas, dim=0))

    def example_input(self, batch_size: int) -> tuple[Tensor, Tensor]:  # for counting FLOPs
        return torch.empty(batch_size, 2), torch.zeros(batch_size, dtype=torch.long)

    def noised(self, x: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        alpha_bar = self.alpha_bars[t].unsqueeze(1)
        return alpha_bar.sqrt() * x + (1 - alpha_bar).sqrt() * noise

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        (x,) = batch
        t = torch.randint(0, self.hparams["timesteps"], (x.size(0),), device=self.device)
        noise = torch.randn_like(x)
        loss = F.mse_loss(self.net(self.noised(x, t, noise), t), noise)
        self.log("train/loss", loss)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # after each optimizer step, as DDPM's trainers do, with their warm-up of the rate: a young average follows
        # the weights closely
        self.ema_updates += 1
        rate = torch.clamp((1 + self.ema_updates) / (10 + self.ema_updates), max=self.hparams["ema_rate"])
        averages = dict(self.ema.named_buffers())
        with torch.no_grad():
            for name, weight in self.net.named_parameters():
                averages[name].lerp_(weight, (1 - rate).to(weight.dtype))

    @torch.no_grad()
    def sample(self, x: Tensor, noise: torch.Generator) -> Tensor:
        """DDPM's ancestral sampling with the average, from the noise `x` back to the data."""
        for step in reversed(range(self.hparams["timesteps"])):
            t = torch.full((x.size(0),), step, device=self.device)
            beta, alpha_bar = self.betas[step], self.alpha_bars[step]
            x = (x - beta / (1 - alpha_bar).sqrt() * self.ema(x, t)) / (1 - beta).sqrt()
            if step > 0:
                x = x + beta.sqrt() * torch.randn(x.shape, generator=noise).to(self.device, x.dtype)
        return x

    def evaluate(self, batch: list[Tensor], batch_idx: int, dataloader_idx: int, stage: str) -> None:
        (x,) = batch
        noise = torch.Generator().manual_seed(batch_idx)  # the same draws at every validation, so that they compare
        if dataloader_idx == 0:
            t = torch.randint(0, self.hparams["timesteps"], (x.size(0),), generator=noise).to(self.device)
            eps = torch.randn(x.shape, generator=noise).to(self.device, x.dtype)
            value, name = F.mse_loss(self.ema(self.noised(x, t, eps), t), eps), "loss"
        else:
            value, name = (self.sample(x, noise).norm(dim=1) - 1).abs().mean(), "ring_distance"
        self.log(f"{stage}/{name}", value, on_epoch=True, sync_dist=True, add_dataloader_idx=False)

    def validation_step(self, batch: list[Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.evaluate(batch, batch_idx, dataloader_idx, "val")

    def test_step(self, batch: list[Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.evaluate(batch, batch_idx, dataloader_idx, "test")

    def configure_optimizers(self) -> dict[str, Any]:
        adamw = torch.optim.AdamW(self.net.parameters(), lr=self.hparams["lr"])
        steps = max(1, int(self.trainer.estimated_stepping_batches))
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(adamw, T_max=steps)
        return {"optimizer": adamw, "lr_scheduler": {"scheduler": cosine, "interval": "step"}}


TASK = Task(
    name="a denoising diffusion model of points on a ring",
    options=DiffusionOptions,
    build_data=lambda cfg, opts, hw: RingPoints(opts.samples, cfg.batch_size, cfg.seed, hw.num_workers, hw.pin_memory),
    build_model=lambda cfg, opts, hw, data: DDPM(opts.hidden, opts.timesteps, opts.ema_rate, cfg.lr),
    monitor="val/loss",
    not_applicable={
        **dict.fromkeys(("weight_decay", "betas", "optimizer", "muon_lr", "warmup_fraction"), OWN_ADAMW),
        **dict.fromkeys(("ema", "ema_decay"), OWN_EMA),
    },
    defaults={"batch_size": 64, "lr": 2e-3},
)

if __name__ == "__main__":
    train(TASK)
