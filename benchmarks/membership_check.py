"""What an elastic job's per-step membership_changed() costs, beside all_reduces.

    asyncoll-run --nproc-per-node 2 benchmarks/membership_check.py
    asyncoll-run --nproc-per-node 4 benchmarks/membership_check.py

Times, per call on this rank (rank 0 prints), membership_changed() while
nothing changes, a 4-byte all_reduce and a 200 KB one: ``calls`` of each
(default 300) after 20 to warm up, each series started together by a barrier.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

import asyncoll as dist


def per_call_us(action: Callable[[], object], calls: int) -> float:
    for _ in range(20):
        action()
    dist.barrier()
    began = time.perf_counter()
    for _ in range(calls):
        action()
    return (time.perf_counter() - began) / calls * 1e6


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    dist.init_process_group(init_method="env://", elastic=True)
    small, large = np.zeros(1, np.float32), np.zeros(50_000, np.float32)
    times = {"membership_changed()": per_call_us(dist.membership_changed, calls),
             "all_reduce 4 B": per_call_us(lambda: dist.all_reduce(small), calls),
             "all_reduce 200 KB": per_call_us(lambda: dist.all_reduce(large), calls)}
    if dist.get_rank() == 0:
        print(f"{dist.get_world_size()} ranks: " + ", ".join(
            f"{name} {us:.0f} us" for name, us in times.items()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
