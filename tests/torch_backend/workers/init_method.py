"""torch's group over the blocking API's elastic world (init_method "asyncoll://"), one process.

Prints one line per check; the test compares them. MASTER_PORT names a free
port for the coordinator this single rank hosts.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.distributed.rendezvous import rendezvous

import asyncoll


def outcome(action) -> str:
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - the class and message are what is checked
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def main() -> None:
    asyncoll.init_process_group(init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
                                world_size=1, rank=0, elastic=True)
    print("rank given:", outcome(lambda: dist.init_process_group(
        "asyncoll", init_method="asyncoll://", rank=1, world_size=1)), flush=True)
    os.environ["TORCH_DIST_INIT_BARRIER"] = "1"
    print("init barrier:", outcome(lambda: dist.init_process_group(
        "asyncoll", init_method="asyncoll://")), flush=True)
    del os.environ["TORCH_DIST_INIT_BARRIER"]

    dist.init_process_group("asyncoll", init_method="asyncoll://")
    tensor = torch.ones(3)
    dist.all_reduce(tensor)
    sub = dist.new_group([0])
    dist.all_reduce(tensor, group=sub)
    print("generation", asyncoll.get_generation(), "backend", dist.get_backend(),
          "sum", tensor.tolist(), flush=True)
    stale_store, _, _ = next(rendezvous("asyncoll://"))

    asyncoll.reconfigure()
    print("old group after reconfigure:", outcome(lambda: dist.all_reduce(tensor)), flush=True)
    dist.destroy_process_group()
    print("stale rendezvous:", outcome(lambda: dist.init_process_group(
        "asyncoll", store=stale_store, rank=0, world_size=1)), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("asyncoll", init_method="asyncoll://")
    dist.all_reduce(tensor)
    print("generation", asyncoll.get_generation(), "rank", dist.get_rank(), "size",
          dist.get_world_size(), "sum", tensor.tolist(), flush=True)
    dist.destroy_process_group()
    print("blocking world still runs:", asyncoll.is_initialized(), flush=True)
    asyncoll.destroy_process_group()


if __name__ == "__main__":
    main()
