"""A GAN in the shape of Lightning's basic GAN example, written from the guide's "Any LightningModule" alone: manual
optimization, two Adams without schedulers, `toggle_optimizer` and `manual_backward`, generator and discriminator in
a `ModuleDict`, and a training_step that returns nothing. It learns points on a ring: `python gan.py --devices 2`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_gpu_engine import ConfigError, Task, eval_loader, opt, train, train_loader

OWN_ADAMS = "the GAN's two Adams are its own (configure_optimizers)"


@dataclass
class GanOptions:
    latent: int = opt(8, "size of the noise the generator turns into a point")
    hidden: int = opt(32, "width of both networks' hidden layer")
    samples: int = opt(1024, "points on the ring to learn from; validation and test get a quarter each")
    beta1: float = opt(0.5, "Adam's beta1 for both networks: GANs train steadier with a short momentum")

    def __post_init__(self) -> None:
        for name in ("latent", "hidden", "samples"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be a positive integer, got {getattr(self, name)}")
        if not 0 <= self.beta1 < 1:
            raise ConfigError("beta1", f"must be in [0, 1), got {self.beta1}")


class RingData(L.LightningDataModule):
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

        self.splits = {"train": ring(hp["samples"]), "val": ring(hp["samples"] // 4), "test": ring(hp["samples"] // 4)}

    def train_dataloader(self) -> DataLoader[Any]:
        hp = self.hparams
        return train_loader(self.splits["train"], hp["batch_size"], hp["seed"], hp["num_workers"], hp["pin_memory"])

    def val_dataloader(self) -> DataLoader[Any]:
        hp = self.hparams
        return eval_loader(self.splits["val"], hp["batch_size"], hp["num_workers"], hp["pin_memory"])

    def test_dataloader(self) -> DataLoader[Any]:
        hp = self.hparams
        return eval_loader(self.splits["test"], hp["batch_size"], hp["num_workers"], hp["pin_memory"])


class GAN(L.LightningModule):
    def __init__(self, latent: int, hidden: int, lr: float, beta1: float) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.nets = nn.ModuleDict(
            {
                "generator": nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, 2)),
                "discriminator": nn.Sequential(nn.Linear(2, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, 1)),
            }
        )

    def forward(self, z: Tensor) -> Tensor:
        return self.nets["generator"](z)

    def example_input(self, batch_size: int) -> dict[str, Tensor]:  # for counting FLOPs: one input per network
        return {
            "nets.generator": torch.empty(batch_size, self.hparams["latent"]),
            "nets.discriminator": torch.empty(batch_size, 2),
        }

    def training_step(self, batch: list[Tensor], batch_idx: int) -> None:
        (real,) = batch
        optimizers = self.optimizers()
        assert isinstance(optimizers, list)
        opt_g, opt_d = optimizers
        z = torch.randn(real.size(0), self.hparams["latent"], device=self.device, dtype=real.dtype)
        ones, zeros = torch.ones(real.size(0), 1, device=self.device), torch.zeros(real.size(0), 1, device=self.device)

        self.toggle_optimizer(opt_g)
        fake = self.nets["generator"](z)
        g_loss = F.binary_cross_entropy_with_logits(self.nets["discriminator"](fake), ones)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        real_loss = F.binary_cross_entropy_with_logits(self.nets["discriminator"](real), ones)
        fake_loss = F.binary_cross_entropy_with_logits(self.nets["discriminator"](fake.detach()), zeros)
        d_loss = (real_loss + fake_loss) / 2
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"train/g_loss": g_loss, "train/d_loss": d_loss})

    def evaluate(self, batch: list[Tensor], batch_idx: int, stage: str) -> None:
        # how far each real point is from the nearest generated one (a collapsed generator covers little of the
        # ring): the same noise for a batch every time, so that epochs compare
        (real,) = batch
        noise = torch.Generator().manual_seed(batch_idx)
        z = torch.randn(real.size(0), self.hparams["latent"], generator=noise).to(self.device, real.dtype)
        distance = torch.cdist(real, self.nets["generator"](z)).min(dim=1).values.mean()
        self.log(f"{stage}/loss", distance, on_epoch=True, sync_dist=True)

    def validation_step(self, batch: list[Tensor], batch_idx: int) -> None:
        self.evaluate(batch, batch_idx, "val")

    def test_step(self, batch: list[Tensor], batch_idx: int) -> None:
        self.evaluate(batch, batch_idx, "test")

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        betas = (self.hparams["beta1"], 0.999)
        lr = self.hparams["lr"]
        return [
            torch.optim.Adam(self.nets["generator"].parameters(), lr=lr, betas=betas),
            torch.optim.Adam(self.nets["discriminator"].parameters(), lr=lr, betas=betas),
        ]


TASK = Task(
    name="a GAN on points of a ring",
    options=GanOptions,
    build_data=lambda cfg, opts, hw: RingData(opts.samples, cfg.batch_size, cfg.seed, hw.num_workers, hw.pin_memory),
    build_model=lambda cfg, opts, hw, data: GAN(opts.latent, opts.hidden, cfg.lr, opts.beta1),
    monitor="val/loss",
    manual_optimization=True,  # --gradient-clip-val and --accumulate-grad-batches are refused as the flags are read
    find_unused_parameters=True,  # toggle_optimizer freezes the other network: DDP must look for unused parameters
    networks=("nets.generator", "nets.discriminator"),  # what --compile compiles and MFU counts
    not_applicable=dict.fromkeys(("weight_decay", "betas", "optimizer", "muon_lr", "warmup_fraction"), OWN_ADAMS),
    defaults={"batch_size": 64, "lr": 2e-3},
)

if __name__ == "__main__":
    train(TASK)
