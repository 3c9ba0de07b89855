#!/usr/bin/env python3
"""asyncoll's adapter for the anchor benchmark harness in ../shared/bench/.

    python benchmarks/anchor_all_reduce.py --world-size 2 --sizes 4,1M,64M [--op broadcast]

Prints the same table as ../shared/bench/gloo_bench.py (every --op it has), so
the two can run one after the other in one shell command and be compared as
ratios. Self-launching like gloo_bench.py: it starts its ranks with
asyncoll-run. The harness is found through ASYNCOLL_BENCH_DIR or at
../shared/bench relative to the repository.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import asyncoll as dist

HERE = Path(__file__).resolve().parent
BENCH_DIR = Path(os.environ.get("ASYNCOLL_BENCH_DIR", HERE.parent.parent / "shared" / "bench"))
sys.path.insert(0, str(BENCH_DIR))
import _bench_common as bc  # noqa: E402


class AsyncollBackend:
    """The harness's backend contract over asyncoll's blocking API."""

    def __init__(self) -> None:
        dist.init_process_group(init_method="env://")
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def barrier(self) -> None:
        dist.barrier()

    def max_across(self, values: np.ndarray) -> np.ndarray:
        out = values.astype(np.float64, copy=True)
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
        return out

    def prepare(self, op: str, count: int):
        n, rank = self.world_size, self.rank
        buf = np.zeros(count, dtype=np.float32)
        out = np.zeros(count * n, dtype=np.float32)
        run = {
            "all_reduce": lambda: dist.all_reduce(buf),
            "all_gather": lambda: dist.all_gather_into_tensor(out, buf),
            "broadcast": lambda: dist.broadcast(buf, src=0),
            "reduce": lambda: dist.reduce(buf, dst=0),
        }[op]
        expected = {
            "all_reduce": lambda: bool((buf == n * (n + 1) / 2).all()),
            "all_gather": lambda: bool((out == np.repeat(np.arange(1, n + 1), count)).all()),
            "broadcast": lambda: bool((buf == 1).all()),
            "reduce": lambda: rank != 0 or bool((buf == n * (n + 1) / 2).all()),
        }[op]

        def check() -> bool:
            buf.fill(rank + 1)
            run()
            ok = expected()
            buf.fill(0)
            return ok

        return run, check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    bc.add_common_args(parser)
    args = parser.parse_args()
    if "RANK" not in os.environ:
        return subprocess.call([sys.executable, "-m", "asyncoll.run", "--nproc-per-node",
                                str(args.world_size), __file__, *sys.argv[1:]])
    backend = AsyncollBackend()
    comments = [f"backend=asyncoll {dist.__version__} transport=tcp 127.0.0.1 "
                f"nproc={os.cpu_count()}"]
    rc = bc.run_sweep(backend, args, comments)
    dist.barrier()
    dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
