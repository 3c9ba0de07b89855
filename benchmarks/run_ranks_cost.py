#!/usr/bin/env python3
"""What a run_ranks call costs, start to end, on asyncio's own event loop.

    python benchmarks/run_ranks_cost.py [--repeats 5]

Times two runs of asyncoll.testing.run_ranks, each ``--repeats`` times: 2
ranks doing one all_reduce (mostly the rendezvous and the shutdown), and 4
ranks doing 200 small all_reduces (the operations themselves), and prints
the median and the spread of each. Run it with each Python to compare them:
on Python 3.12 and 3.13 each run once ended with an 11 s stall (CPython
gh-155888, see tests/collectives/test_clean_shutdown.py).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import numpy as np

from asyncoll.testing import run_ranks


def _body(operations: int):
    async def body(world) -> float:
        x = np.ones(4)
        for _ in range(operations):
            await world.all_reduce(x)
        return float(x[0])
    return body


def _seconds(world_size: int, operations: int) -> float:
    began = time.perf_counter()
    asyncio.run(run_ranks(world_size, _body(operations)))
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, asyncio's own event loop, "
          f"{args.repeats} runs each")
    for world_size, operations in ((2, 1), (4, 200)):
        times = [_seconds(world_size, operations) for _ in range(args.repeats)]
        print(f"run_ranks({world_size}, {operations} all_reduce): median "
              f"{statistics.median(times):.3f} s (min {min(times):.3f}, max {max(times):.3f})",
              flush=True)


if __name__ == "__main__":
    main()
