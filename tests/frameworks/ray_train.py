"""Ray Train's own linear example under a TorchTrainer, on given backends; print their losses.

    python tests/frameworks/ray_train.py gloo asyncoll

The training function is the one the ray wheel ships
(ray/train/examples/pytorch/torch_linear_example.py), unchanged; these lines
only start it with ``TorchConfig(backend=...)``, once a backend, on one local
Ray cluster of two workers (a trainer's workers are actors of its own, in
processes of their own), seeded through Ray's own ``enable_reproducibility``
so that runs on different backends start from the same weights. The last line
printed is a JSON object: for each backend, the validation loss after each
epoch.
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import ray
import ray.train.torch
import torch.distributed
from ray.train import RunConfig, ScalingConfig
from ray.train.examples.pytorch.torch_linear_example import train_func
from ray.train.torch import TorchConfig, TorchTrainer


def seeded(config: dict[str, Any]) -> Any:
    ray.train.torch.enable_reproducibility(seed=0)
    results = train_func(config)
    # The backend that ran is the one asked for (Ray does not fall back, but check).
    ran = torch.distributed.get_backend()
    if ran != config["backend"]:
        raise RuntimeError(f"Ray Train ran on backend {ran!r}, not {config['backend']!r}")
    return results


def losses_on(backend: str, storage: str) -> list[float]:
    """The validation losses of one TorchTrainer run of the example on ``backend``."""
    trainer = TorchTrainer(
        train_loop_per_worker=seeded,
        train_loop_config={"lr": 1e-2, "hidden_size": 1, "batch_size": 4, "epochs": 3,
                           "backend": backend},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        torch_config=TorchConfig(backend=backend),
        run_config=RunConfig(storage_path=storage, name=f"linear-{backend}"),
    )
    result = trainer.fit()
    return list(result.metrics_dataframe["loss"].tolist())


def main() -> None:
    # One Ray cluster for every backend: its start is most of a run's time.
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as storage:
        losses = {backend: losses_on(backend, storage) for backend in sys.argv[1:]}
    ray.shutdown()
    print(json.dumps(losses), flush=True)


if __name__ == "__main__":
    main()
