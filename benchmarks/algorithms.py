#!/usr/bin/env python3
"""Time every all_reduce algorithm over a range of sizes, and show what the selector picks.

    python benchmarks/algorithms.py --world-sizes 2,4 --sizes 4,64,1K,16K,64K,256K,1M,4M,16M,64M

For each world size it starts that many ranks (asyncoll-run) over loopback
TCP; each rank times float32 SUM all_reduce with each algorithm forced, op
by op (each op's time is the max over ranks, as the anchor benchmarks in
../shared/bench do), and rank 0 prints one row per size: the median time of
each algorithm in microseconds, the fastest, and the selector's choice.

This is how the thresholds in asyncoll/_algorithms/selection.py were
chosen: re-run it on a quiet machine, read off where the fastest algorithm
changes, and update the constants and the table in that module's docstring
together. Pass --collective broadcast or reduce to time those (tree, chain).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

import asyncoll as dist
from asyncoll._api import blocking as _blocking
from asyncoll._algorithms import selection

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    text = text.strip().upper().rstrip("B").rstrip("I")
    unit = text[-1] if text and text[-1] in _SUFFIX else ""
    return int(float(text[:len(text) - len(unit)]) * _SUFFIX[unit])


def human(nbytes: int) -> str:
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def max_across(values: np.ndarray) -> np.ndarray:
    out = values.astype(np.float64, copy=True)
    dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return out


def time_one(collective: str, algorithm: str, count: int, target_s: float) -> float:
    """Median microseconds of one op, the max over ranks per op."""
    # Zeros: repeated SUMs never overflow. The blocking API has no algorithm
    # argument: run the default group's coroutines on the runtime's loop, as it does.
    buf = np.zeros(count, dtype=np.float32)
    world = _blocking._default()
    run = {
        "all_reduce": lambda: _blocking._run(world.all_reduce(buf, algorithm=algorithm)),
        "broadcast": lambda: _blocking._run(world.broadcast(buf, 0, algorithm=algorithm)),
        "reduce": lambda: _blocking._run(world.reduce(buf, 0, algorithm=algorithm)),
    }[collective]

    warmup = 10 if count * 4 <= (1 << 20) else 2
    start = time.perf_counter()
    for _ in range(warmup):
        run()
    estimate = float(max_across(np.array([(time.perf_counter() - start) / warmup]))[0])
    iterations = int(min(1000, max(5, target_s / max(estimate, 1e-9))))
    times = np.empty(iterations)
    dist.barrier()
    for i in range(iterations):
        began = time.perf_counter_ns()
        run()
        times[i] = time.perf_counter_ns() - began
    return float(np.median(max_across(times))) / 1e3


def rank_main(args: argparse.Namespace) -> int:
    dist.init_process_group(init_method="env://")
    n = dist.get_world_size()
    names = selection.ALGORITHMS[args.collective]
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    if dist.get_rank() == 0:
        print(f"# {args.collective}, float32 SUM, world size {n}, loopback TCP, "
              f"{os.cpu_count()} CPUs; median us per op (max over ranks)")
        print(f"{'size':>6} " + " ".join(f"{name:>18}" for name in names)
              + f" {'fastest':>18} {'selector':>18}")
    for size in sizes:
        count = max(1, size // 4)
        timed = {name: time_one(args.collective, name, count, args.target_s) for name in names}
        if dist.get_rank() == 0:
            fastest = min(timed, key=lambda name: timed[name])
            chosen = selection.choose(args.collective, count * 4, n)
            print(f"{human(size):>6} " + " ".join(f"{timed[name]:>18.1f}" for name in names)
                  + f" {fastest:>18} {chosen:>18}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--sizes", default="4,64,1K,4K,16K,64K,256K,1M,4M,16M,64M")
    parser.add_argument("--collective", default="all_reduce",
                        choices=sorted(selection.ALGORITHMS))
    parser.add_argument("--target-s", type=float, default=0.5,
                        help="timed seconds per size and algorithm (default 0.5)")
    args = parser.parse_args()
    if "RANK" in os.environ:
        return rank_main(args)
    status = 0
    for world_size in args.world_sizes.split(","):
        status |= subprocess.call([sys.executable, "-m", "asyncoll.run", "--nproc-per-node",
                                   world_size.strip(), __file__, *sys.argv[1:]])
    return status


if __name__ == "__main__":
    sys.exit(main())
