#!/usr/bin/env python3
"""How much of a small all_reduce's latency is the blocking API's thread hop?

    python benchmarks/blocking_vs_aio.py [--world-size 2] [--iterations 5000]

Runs the same 4-byte all_reduce loop twice under asyncoll-run: once through
asyncoll.aio in the rank's own event loop, once through the blocking API
(which hops to asyncoll's loop thread and back). Rank 0 prints the median
and minimum microseconds per op of each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

import numpy as np


def _report(what: str, times: list[int]) -> None:
    print(f"{what:>9}: median {np.median(times) / 1e3:8.1f} us   min {min(times) / 1e3:8.1f} us",
          flush=True)


async def _aio(iterations: int) -> None:
    from asyncoll import aio
    world = await aio.init_process_group(init_method="env://")
    x = np.zeros(1, np.float32)
    for _ in range(iterations // 10):
        await world.all_reduce(x)
    times = []
    for _ in range(iterations):
        began = time.perf_counter_ns()
        await world.all_reduce(x)
        times.append(time.perf_counter_ns() - began)
    if world.rank == 0:
        _report("aio", times)
    await world.destroy()


def _blocking(iterations: int) -> None:
    import asyncoll as dist
    dist.init_process_group(init_method="env://")
    x = np.zeros(1, np.float32)
    for _ in range(iterations // 10):
        dist.all_reduce(x)
    times = []
    for _ in range(iterations):
        began = time.perf_counter_ns()
        dist.all_reduce(x)
        times.append(time.perf_counter_ns() - began)
    if dist.get_rank() == 0:
        _report("blocking", times)
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--mode", choices=["aio", "blocking"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "aio":
        from asyncoll._compat import loop_factory
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(_aio(args.iterations))
        return 0
    if args.mode == "blocking":
        _blocking(args.iterations)
        return 0
    status = 0
    for mode in ("aio", "blocking"):
        status |= subprocess.call([sys.executable, "-m", "asyncoll.run", "--nproc-per-node",
                                   str(args.world_size), os.path.abspath(__file__),
                                   "--iterations", str(args.iterations), "--mode", mode])
    return status


if __name__ == "__main__":
    sys.exit(main())
