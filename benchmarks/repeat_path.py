"""The repeat path: the least time per blocking call, over batches of one small call.

Every small blocking call that repeats an earlier one's signature takes this
path (Repeats.again and the fast path's kernel). Run under the launcher,
one rank pinned to one CPU or several:

    taskset -c 1 asyncoll-run --nproc-per-node 1 benchmarks/repeat_path.py
    asyncoll-run --nproc-per-node 2 benchmarks/repeat_path.py

For two ranks that name different hosts, so that they run over direct
links, start each with RANK, WORLD_SIZE=2, MASTER_ADDR, MASTER_PORT and its
own ASYNCOLL_HOSTNAME. Compare versions side by side in one sitting.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

import asyncoll as dist


def least_per_call(call: Callable[[], object], batches: int, calls: int) -> float:
    """The least seconds per call over ``batches`` batches of ``calls`` calls."""
    for _ in range(calls):
        call()
    best = float("inf")
    for _ in range(batches):
        began = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - began) / calls)
    return best


def main() -> None:
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    dist.init_process_group(init_method="env://")
    x = np.zeros(1, np.float32)
    calls: dict[str, Callable[[], object]] = {
        "barrier": dist.barrier,
        "all_reduce 4 B": lambda: dist.all_reduce(x),
        "broadcast 4 B": lambda: dist.broadcast(x, 0),
    }
    times = [f"{name} {least_per_call(call, batches, 200) * 1e6:.2f} us"
             for name, call in calls.items()]
    if dist.get_rank() == dist.get_world_size() - 1:
        print(" | ".join(times), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
