"""Trains one small model with DDP exact, and with asyncoll's compression hook, step by step.

Launched as WORLD_SIZE processes by tests/torch_backend/test_compression_hook.py, with
env:// variables. Each rank names a host of its own (ASYNCOLL_HOSTNAME), so its frames
are compressed as between machines. From the same seed, the same model trains STEPS
steps on the same per-rank batches three times: DDP's exact allreduce, the hook with
int8 and error feedback, and the hook with bf16. It prints one JSON line: the three
loss curves, and whether every rank holds the same parameters after each.
"""

from __future__ import annotations

import faulthandler
import json
import os

os.environ["ASYNCOLL_HOSTNAME"] = f"pretend-host-{os.environ['RANK']}"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from asyncoll.torch import compression_hook  # noqa: E402

STEPS = int(os.environ.get("STEPS", "300"))


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 20, generator=generator)
    return x, torch.sin(x[:, :4]).sum(dim=1, keepdim=True)


def train(hook: object) -> tuple[list[float], bool]:
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(20, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(),
                              nn.Linear(128, 1)), bucket_cap_mb=0.02)
    if hook is not None:
        model.register_comm_hook(None, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x, y = batch(step, dist.get_rank())
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, flat)
    return losses, all(torch.equal(flat, other) for other in everyone)


def main() -> None:
    faulthandler.dump_traceback_later(float(os.environ.get("DUMP_AFTER_S", "200")), exit=True)
    dist.init_process_group(backend="asyncoll")
    runs = {"exact": train(None),
            "int8": train(compression_hook("int8", error_feedback=True)),
            "bf16": train(compression_hook("bf16"))}
    print(json.dumps({"rank": dist.get_rank(),
                      "losses": {name: losses for name, (losses, _) in runs.items()},
                      "ranks_agree": {name: agree for name, (_, agree) in runs.items()}}),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
