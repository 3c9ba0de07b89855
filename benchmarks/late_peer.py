"""How soon a rank waiting in a small all_reduce returns once a late peer calls it.

Rank 1 computes for ``late`` seconds before each all_reduce, rank 0 calls at
once and waits; the time from rank 1's call to rank 0's return (both read
CLOCK_MONOTONIC, shared by the processes of one host) is what a waiting
rank loses on top of the wait itself. ``--timed-sleeps`` turns the arena's
futex wake-ups off, to compare with sleeping in timed steps:

    asyncoll-run --nproc-per-node 2 benchmarks/late_peer.py 0.003
    asyncoll-run --nproc-per-node 2 benchmarks/late_peer.py 0.003 --timed-sleeps
"""

from __future__ import annotations

import sys
import time

import numpy as np

from asyncoll._transport.shm import futex

if "--timed-sleeps" in sys.argv:
    futex.AVAILABLE = False  # read when the group's arena is mapped

import asyncoll as dist  # after the switch above


def main() -> None:
    late = float(next((a for a in sys.argv[1:] if not a.startswith("--")), "0.003"))
    ops = 300
    dist.init_process_group(init_method="env://")
    data = np.zeros(1, np.float32)
    for _ in range(50):
        dist.all_reduce(data)
    dist.barrier()
    stamps = np.zeros(ops)
    for i in range(ops):
        if dist.get_rank() == 1:
            end = time.perf_counter() + late
            while time.perf_counter() < end:
                pass  # compute, holding the processor as work does
            stamps[i] = time.perf_counter()
            dist.all_reduce(data)
        else:
            dist.all_reduce(data)
            stamps[i] = time.perf_counter()
    both = [np.zeros(ops), np.zeros(ops)]
    dist.all_gather(both, stamps)
    if dist.get_rank() == 0:
        lag = (both[0] - both[1]) * 1e6
        how = "timed sleeps" if "--timed-sleeps" in sys.argv else "futex wake-ups"
        print(f"{how}: late rank's call -> waiting rank's return: median {np.median(lag):.0f}"
              f" us, p90 {np.percentile(lag, 90):.0f} us ({ops} ops, {late * 1e3:g} ms late)",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
