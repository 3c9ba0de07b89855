"""PyTorch Lightning's own BoringModel trained with DDP on two CPU processes, on a given backend.

    python tests/frameworks/lightning_train.py asyncoll

The model and its data are the ones Lightning ships
(lightning.pytorch.demos.boring_classes), unchanged; these lines only start
``Trainer(strategy=DDPStrategy(process_group_backend=...), accelerator="cpu",
devices=2)``, seeded, and note each step's loss. Lightning starts the second
process by running this script again. Rank 0's last line printed is a JSON
object: its losses, step by step, and the trained parameters.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import lightning.pytorch as pl
import torch.distributed
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.strategies import DDPStrategy


class Losses(pl.Callback):
    """Each training step's loss, and a check that the backend asked for runs."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.losses: list[float] = []

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        ran = torch.distributed.get_backend()
        if ran != self.backend:
            raise RuntimeError(f"Lightning runs on backend {ran!r}, not {self.backend!r}")

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        self.losses.append(float(outputs["loss"]))


def main() -> None:
    backend = sys.argv[1]
    pl.seed_everything(0, verbose=False)
    model, losses = BoringModel(), Losses(backend)
    trainer = pl.Trainer(strategy=DDPStrategy(process_group_backend=backend),
                         accelerator="cpu", devices=2, max_epochs=2, callbacks=[losses],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, deterministic=True)
    trainer.fit(model)
    if trainer.global_rank == 0:
        parameters = [p.detach().flatten().tolist() for p in model.parameters()]
        print(json.dumps({"losses": losses.losses, "parameters": parameters}), flush=True)


if __name__ == "__main__":
    main()
