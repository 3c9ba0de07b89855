"""Exercises the blocking API in a real job of 3 processes (run with asyncoll-run).

Every check is an assert; the process prints ``rank R OK`` only if all pass.
"""

import warnings

import numpy as np

import asyncoll as dist

dist.init_process_group(init_method="env://", timeout=60)
rank = dist.get_rank()
assert dist.is_initialized() and dist.get_world_size() == 3

try:
    dist.init_process_group(init_method="env://")
    raise AssertionError("a second init_process_group was accepted")
except dist.ConfigurationError as exc:
    assert "called twice" in str(exc)

# A non-member calling a collective on a group gets a warning and keeps its tensor.
evens = dist.new_group([0, 2])
x = np.full(3, rank + 1, dtype=np.float64)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert dist.all_reduce(x, op=dist.ReduceOp.MAX, group=evens) is None
if rank == 1:
    assert len(caught) == 1 and "does not belong to the given group" in str(caught[0].message)
    assert x.tolist() == [2.0, 2.0, 2.0]
    assert dist.get_rank(evens) == -1 and dist.get_world_size(evens) == -1
else:
    assert not caught and x.tolist() == [3.0, 3.0, 3.0]
    assert dist.get_rank(evens) == rank // 2 and dist.get_world_size(evens) == 2

# Several async operations in flight complete, in order, with the right results.
arrays = [np.full(1000 * (i + 1), rank + i, dtype=np.int64) for i in range(5)]
works = [dist.all_reduce(a, async_op=True) for a in arrays]
assert all(w.wait(timeout=30) is True for w in works)
assert all(w.is_completed() and w.exception() is None for w in works)
for i, a in enumerate(arrays):
    assert (a == 3 + 3 * i).all()

# Refusals are typed and happen in the caller, before anything is sent.
try:
    dist.all_reduce(np.arange(3), op=dist.ReduceOp.AVG)
    raise AssertionError("AVG on integers was accepted")
except dist.ConfigurationError as exc:
    assert "AVG needs a floating or complex array, got dtype int64" in str(exc)

dist.barrier()
dist.destroy_process_group()
assert not dist.is_initialized()

# The same processes can join again (a restart without relaunching).
dist.init_process_group(init_method="env://", timeout=60)
y = np.ones(2, dtype=np.float32)
dist.all_reduce(y)
assert y.tolist() == [3.0, 3.0]
dist.destroy_process_group()
print(f"rank {rank} OK", flush=True)
