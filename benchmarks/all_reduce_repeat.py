"""One all_reduce size, timed op by op: the median of each op's max over ranks.

Run under the launcher, e.g. 4 ranks at 16 MiB (float32), 60 ops:

    asyncoll-run --nproc-per-node 4 benchmarks/all_reduce_repeat.py 16M 60

Used to compare two versions side by side in one sitting (install each in
its own venv and run them in turn); the numbers hold only within one run.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import asyncoll as dist

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from '4', '64K', '16M', '1G'."""
    if text[-1:].upper() in UNITS:
        return int(text[:-1]) * UNITS[text[-1].upper()]
    return int(text)


def main() -> None:
    nbytes = parse_size(sys.argv[1]) if len(sys.argv) > 1 else 16 << 20
    ops = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    dist.init_process_group(init_method="env://")
    data = np.zeros(max(1, nbytes // 4), np.float32)
    for _ in range(2):
        dist.all_reduce(data)
    dist.barrier()
    times = np.empty(ops)
    for i in range(ops):
        began = time.perf_counter()
        dist.all_reduce(data)
        times[i] = time.perf_counter() - began
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(f"{dist.get_world_size()} ranks, {nbytes} bytes: median {np.median(times) * 1e3:.2f}"
              f" ms, min {times.min() * 1e3:.2f} ms over {ops} ops", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
