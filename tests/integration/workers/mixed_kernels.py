"""One job whose ranks run different kernels: the compiled arena steps and pure Python.

Usage (under asyncoll-run, 2 or more ranks): mixed_kernels.py [desync]

Even ranks set ASYNCOLL_PURE_PYTHON=1 before importing asyncoll; odd ranks
run the compiled extension. Every small collective the arena runs, the
reductions of every supported dtype, and pieces larger than a slot, are
checked against the sums numpy makes; each rank prints
"RESULT <rank> <kernels> ok=<n>". With ``desync``, rank 0 all_reduces while
the others broadcast, and each rank prints the error it got.
"""

import os
import sys

if int(os.environ["LOCAL_RANK"]) % 2 == 0:
    os.environ["ASYNCOLL_PURE_PYTHON"] = "1"

import numpy as np  # noqa: E402

import asyncoll as dist  # noqa: E402
from asyncoll import _native  # noqa: E402

dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
kernels = "python" if _native.arena is None else "native"
if len(sys.argv) > 1 and sys.argv[1] == "desync":
    x = np.ones(8, dtype=np.float32)
    try:
        dist.all_reduce(x) if rank == 0 else dist.broadcast(x, src=0)
        print(f"RESULT {rank} {kernels} no error", flush=True)
    except dist.CollectiveError as exc:
        print(f"RESULT {rank} {kernels} {type(exc).__name__}: {exc}", flush=True)
    dist.destroy_process_group()
    sys.exit(0)

ok = 0
members = np.arange(1, size + 1)
for repeat in range(3):
    for dtype in ("float32", "float64", "float16", "int8", "int32", "uint64", "complex64"):
        for count in (1, 7, 1000, 20_000, 300_000):
            x = (np.arange(count) % 5 + rank + 1).astype(dtype)
            dist.all_reduce(x)
            expected = sum((np.arange(count) % 5 + r + 1).astype(dtype) for r in members - 1)
            assert np.array_equal(x, np.asarray(expected, dtype=dtype)), (dtype, count)
            ok += 1
    y = np.full(33, rank + 1.5, dtype=np.float32)
    dist.all_reduce(y, op=dist.ReduceOp.AVG)
    assert np.all(y == np.float32(members.mean() + 0.5)), y[:3]
    m = np.array([rank, -rank], dtype=np.int64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    assert m.tolist() == [size - 1, 0], m
    b = np.full(100, rank, dtype=np.int16)
    dist.broadcast(b, src=size - 1)
    assert np.all(b == size - 1), b[:3]
    r = np.full(50, rank + 1, dtype=np.float64)
    dist.reduce(r, dst=0)
    assert rank != 0 or np.all(r == members.sum()), r[:3]
    dist.barrier()
    out = np.zeros(4 * size, dtype=np.int32)
    dist.all_gather_into_tensor(out, np.full(4, rank, dtype=np.int32))
    assert np.array_equal(out, np.repeat(np.arange(size), 4)), out
    ok += 5
print(f"RESULT {rank} {kernels} ok={ok}", flush=True)
dist.destroy_process_group()
