"""Trains one small model with DistributedDataParallel on gloo and on asyncoll, step by step.

Launched as WORLD_SIZE processes by tests/torch_backend/test_ddp.py, with env:// variables.
The default group is backend='asyncoll'; a second group of every rank is gloo's. Each rank
builds the same two models from its own seed (DDP broadcasts rank 0's parameters at
construction), wraps one in DDP over the gloo group and one over the default group, and
trains both for STEPS steps on the same per-rank batches (SGD with momentum, several
gradient buckets). It prints one JSON line: both loss curves, the largest parameter
difference between the two models, and whether every rank holds the same asyncoll-trained
parameters.
"""

from __future__ import annotations

import copy
import faulthandler
import gc
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = int(os.environ.get("STEPS", "40"))


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 10, generator=generator)
    return x, 0.5 * x[:, :3].sum(dim=1, keepdim=True)


def main() -> None:
    # A stuck process dumps every thread's stack to stderr, which the test shows, and exits.
    faulthandler.dump_traceback_later(float(os.environ.get("DUMP_AFTER_S", "100")), exit=True)
    dist.init_process_group(backend="asyncoll")
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(rank)  # different on every rank: DDP must broadcast rank 0's
    model = nn.Sequential(nn.Linear(10, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                          nn.Linear(64, 1))
    # A tiny bucket cap splits the gradients into several allreduces.
    reference = DDP(copy.deepcopy(model), process_group=gloo, bucket_cap_mb=0.01)
    tested = DDP(copy.deepcopy(model), bucket_cap_mb=0.01)
    losses: dict[str, list[float]] = {"gloo": [], "asyncoll": []}
    for name, ddp in (("gloo", reference), ("asyncoll", tested)):
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.02, momentum=0.9)
        for step in range(STEPS):
            x, y = batch(step, rank)
            loss = nn.functional.mse_loss(ddp(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses[name].append(loss.item())
    difference = max(float((a.detach() - b.detach()).abs().max()) for a, b in
                     zip(reference.module.parameters(), tested.module.parameters()))
    flat = torch.cat([p.detach().reshape(-1) for p in tested.module.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, flat, group=gloo)
    print(json.dumps({"rank": rank, "losses": losses, "max_parameter_difference": difference,
                      "ranks_agree": all(torch.equal(flat, other) for other in everyone),
                      "parameters": flat.numel()}), flush=True)
    dist.destroy_process_group()
    # asyncoll's DDP (its reducer holds the asyncoll group) is freed as a program's would be.
    del tested
    gc.collect()
    # gloo's is not: torch's gloo group, freed from Python, joins its worker threads
    # holding the GIL, while a worker that has not yet let go of the last all_gather's
    # tensors waits for the GIL to drop their Python objects. Under CPU load that
    # deadlock was seen at exit (ProcessGroupGloo's destructor in thread::join, its
    # worker in gil_scoped_acquire under ~AsyncAllgatherWork; no asyncoll frame).
    os._exit(0)


if __name__ == "__main__":
    main()
