"""Elastic DistributedDataParallel on torch: it survives a kill -9 and admits a new worker.

    asyncoll-run --nproc-per-node 3 --max-restarts 1 examples/elastic_ddp.py

The torch DDP form of examples/elastic_training.py. torch's default group runs
on asyncoll's elastic world (``init_method="asyncoll://"``). When a worker is
lost, or a replacement waits to join, every worker destroys torch's group,
calls ``asyncoll.reconfigure()`` and makes torch's group and the DDP model
again, in the same process: no restart, no checkpoint. DDP's constructor
broadcasts rank 0's parameters, and rank 0 broadcasts the step, so a newcomer
starts from the others' state.

Options: ``--steps`` (default 300), ``--pause`` (seconds per step, default
0.01). Each worker prints its pid and rank when it starts, one line per
membership change, one when its first step in each world is done (with the
time) and, at the end, the checksum of its parameters.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import asyncoll

#: What a lost peer raises: asyncoll's error in torch's calls, a RuntimeError in
#: DDP's backward (torch's reducer wraps it).
LOST = (asyncoll.CollectiveError, RuntimeError)


def torch_world(model: torch.nn.Module, step: torch.Tensor) -> DistributedDataParallel:
    """torch's group over asyncoll's current world, and the model in it (rank 0's state)."""
    dist.init_process_group("asyncoll", init_method="asyncoll://")
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters
    dist.broadcast(step, src=0)
    return ddp


def go_on(model: torch.nn.Module, step: torch.Tensor, why: str) -> DistributedDataParallel:
    """Leave torch's group, reconfigure with the survivors and newcomers, make it again.

    Another member lost meanwhile fails the rebuild: reconfigure again.
    """
    before = asyncoll.get_world_size()
    began = time.monotonic()
    while True:
        if dist.is_initialized():
            dist.destroy_process_group()
        asyncoll.reconfigure()
        try:
            ddp = torch_world(model, step)
            break
        except LOST:
            continue
    print(f"[pid {os.getpid()}] {why}: world {before} -> {asyncoll.get_world_size()}, now "
          f"rank {asyncoll.get_rank()}, at step {int(step)}, in "
          f"{time.monotonic() - began:.2f} s", flush=True)
    return ddp


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This worker's data for ``step`` (seeded: a redone step sees the same data)."""
    generator = torch.Generator().manual_seed(step * 1000 + asyncoll.get_rank())
    inputs = torch.randn(32, 16, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True).sin()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--pause", type=float, default=0.01)
    args = parser.parse_args()

    torch.manual_seed(0)
    asyncoll.init_process_group(init_method="env://", elastic=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 1))
    step = torch.zeros((), dtype=torch.int64)
    ddp = torch_world(model, step)
    if asyncoll.get_generation() == 0:
        print(f"[pid {os.getpid()}] rank {asyncoll.get_rank()} of "
              f"{asyncoll.get_world_size()} training", flush=True)
    else:
        print(f"[pid {os.getpid()}] joined as rank {asyncoll.get_rank()} of "
              f"{asyncoll.get_world_size()} at step {int(step)}", flush=True)
    new_world = True  # its first step is said, in this world as in each one after
    while step < args.steps:
        try:
            if asyncoll.membership_changed():
                ddp = go_on(model, step, "membership changed")
                new_world = True
                continue
            model.zero_grad()
            inputs, targets = batch(int(step))
            loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
            loss.backward()  # DDP all-reduces the gradients here
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter -= 0.05 * parameter.grad
            step += 1
            if new_world:
                print(f"[pid {os.getpid()}] first step in a world of "
                      f"{asyncoll.get_world_size()} done at {time.time():.3f}", flush=True)
                new_world = False
            time.sleep(args.pause)
        except LOST as exc:  # a peer died mid-step: the step is redone
            ddp = go_on(model, step, f"{type(exc).__name__} at step {int(step)}")
            new_world = True
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in model.parameters())).hexdigest()[:16]
    print(f"[pid {os.getpid()}] rank {asyncoll.get_rank()} of {asyncoll.get_world_size()} "
          f"done at step {int(step)}: weights {digest}", flush=True)
    dist.destroy_process_group()
    asyncoll.destroy_process_group()


if __name__ == "__main__":
    main()
