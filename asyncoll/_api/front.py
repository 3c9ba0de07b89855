"""`dist.all_reduce` and `dist.barrier` as the package offers them.

Where the compiled extension is built, each is a Front (asyncoll/_native/front.c)
of the function in `asyncoll._api.blocking`: a call it can take
(`all_reduce(tensor)`, `all_reduce(tensor, op)`, `barrier()`, on the
world) goes straight to the world group's compiled entry
(asyncoll._group.express), so a repeated small call is one C call from the
caller to its result. A call the entry declines goes on to the function's
declined twin (`blocking._all_reduce_declined`, `blocking._barrier_declined`),
which does not ask the entry again; any other call runs the function itself,
unchanged. A Front's `__wrapped__`, name, docstring and signature are the
function's. Without the extension, these are the functions.
"""

from __future__ import annotations

from typing import Any

from asyncoll import _native
from asyncoll._api import blocking, world
from asyncoll._native.contract import ALL_REDUCE, BARRIER
from asyncoll.types import ReduceOp

all_reduce: Any = blocking.all_reduce
barrier: Any = blocking.barrier
if _native.arena is not None:
    all_reduce = _native.arena.Front(blocking.all_reduce, ALL_REDUCE, world, ReduceOp.SUM,
                                     blocking._all_reduce_declined)
    barrier = _native.arena.Front(blocking.barrier, BARRIER, world, None,
                                  blocking._barrier_declined)
