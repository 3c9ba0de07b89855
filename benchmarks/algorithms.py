#!/usr/bin/env python3
"""Time every all_reduce algorithm over a range of sizes, and show what the selector picks.

    python benchmarks/algorithms.py --world-sizes 2,4 --sizes 4,64,1K,16K,64K,256K,1M,4M,16M,64M
    sudo python benchmarks/algorithms.py --hosts 2 --sizes 4,64K,1M,4M,16M

For each world size it starts that many ranks (asyncoll-run) on this host;
each rank times float32 SUM all_reduce with each algorithm forced, op by op
(each op's time is the max over ranks, as the anchor benchmarks in
../shared/bench do), and rank 0 prints one row per size: the median time of
each algorithm in microseconds ("-" where the group cannot run it: the
arena across hosts or past its slots, direct links on one host or past
their capacity), the fastest, and the algorithm the group picks by itself.
``--hosts N`` runs one rank in each of N network-namespace hosts instead
(root; tests/multihost/netns-cluster.sh), where direct links replace the
arena. The calling-thread paths take their default capacities: raise
ASYNCOLL_ARENA_BYTES or ASYNCOLL_LINKS_BYTES to time them further.

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
from asyncoll._api import world as _world
from asyncoll._runtime.runtime import runtime
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


def time_one(collective: str, algorithm: str, count: int, target_s: float) -> float | None:
    """Median microseconds of one op, the max over ranks per op; None where the group
    cannot run ``algorithm`` on ``count`` elements (every rank agrees: the choice is
    made from the group's paths and the size)."""
    # Zeros: repeated SUMs never overflow. The blocking API has no algorithm
    # argument: run the default group's coroutines on the runtime's loop, as it does.
    buf = np.zeros(count, dtype=np.float32)
    world, loop = _world.default(), runtime()
    run = {
        "all_reduce": lambda: world.execute(world.all_reduce(buf, algorithm=algorithm), loop),
        "broadcast": lambda: world.execute(world.broadcast(buf, 0, algorithm=algorithm), loop),
        "reduce": lambda: world.execute(world.reduce(buf, 0, algorithm=algorithm), loop),
    }[collective]

    warmup = 10 if count * 4 <= (1 << 20) else 2
    start = time.perf_counter()
    try:
        run()
    except dist.ConfigurationError:
        return None
    for _ in range(warmup - 1):
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
        where = (f"one rank in each of {n} namespace hosts" if "ASYNCOLL_BENCH_HOSTS" in os.environ
                 else f"{n} ranks on one host")
        print(f"# {args.collective}, float32 SUM, {where}, {os.cpu_count()} CPUs; "
              "median us per op (max over ranks)")
        print(f"{'size':>6} " + " ".join(f"{name:>18}" for name in names)
              + f" {'fastest':>18} {'selector':>18}")
    for size in sizes:
        count = max(1, size // 4)
        timed = {name: time_one(args.collective, name, count, args.target_s) for name in names}
        if dist.get_rank() == 0:
            ran = {name: us for name, us in timed.items() if us is not None}
            fastest = min(ran, key=lambda name: ran[name])
            chosen = _world.default()._choose(args.collective, count * 4, None)
            print(f"{human(size):>6} " + " ".join(
                f"{'-' if us is None else f'{us:.1f}':>18}" for us in timed.values())
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
    parser.add_argument("--hosts", type=int, default=0,
                        help="one rank in each of this many namespace hosts (root), "
                        "instead of --world-sizes ranks on this host")
    args = parser.parse_args()
    if "RANK" in os.environ:
        return rank_main(args)
    if args.hosts:
        return across_hosts(args.hosts)
    status = 0
    for world_size in args.world_sizes.split(","):
        status |= subprocess.call([sys.executable, "-m", "asyncoll.run", "--nproc-per-node",
                                   world_size.strip(), __file__, *sys.argv[1:]])
    return status


def across_hosts(hosts: int) -> int:
    """Run this script's ranks one per namespace host (as cross_host.py runs the bench)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cross_host  # noqa: PLC0415 (a sibling script, needed in this mode alone)

    if os.geteuid() != 0:
        raise SystemExit("--hosts needs root (network namespaces)")
    cross_host.cluster("down")
    cross_host.cluster("up", str(hosts))
    procs = []
    try:
        for rank in range(hosts):
            env = {**cross_host.rank_env(rank, hosts), "ASYNCOLL_BENCH_HOSTS": str(hosts)}
            procs.append(subprocess.Popen(
                ["bash", str(cross_host.SCRIPT), "exec", str(rank), sys.executable,
                 os.path.abspath(__file__), *sys.argv[1:]], env=env, cwd="/",
                stdout=None if rank == 0 else subprocess.DEVNULL))
        return max(proc.wait(timeout=3600) for proc in procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        cross_host.cluster("down")


if __name__ == "__main__":
    sys.exit(main())
