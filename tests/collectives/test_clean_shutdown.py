"""A finished job shuts down without waiting out any deadline, on every Python.

Each rank's shutdown (the mesh's goodbyes, its listener, the coordinator's
stop) has deadlines for peers that never answer. In the normal case none of
them may expire: on Python 3.12 and 3.13 one did, for 10 s at the end of every
``run_ranks``, because asyncio's own loop never drains an empty part given to
``writelines`` (CPython gh-155888), and a goodbye frame has an empty payload.

The test runs on asyncio's own event loop, where that bug lives, and counts
the deadlines that expire, not the seconds: a slow machine cannot fail it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from asyncoll.testing import run_ranks

pytestmark = pytest.mark.timeout(120)

#: The callbacks that a deadline's expiry runs: asyncio.timeout's, asyncio.wait's
#: (and wait_for's before 3.12), and asyncoll._compat.timeout's on Python 3.10.
DEADLINE_EXPIRIES = {"Timeout._on_timeout", "_release_waiter", "timeout.<locals>.expire"}


class DeadlineCountingLoop(asyncio.SelectorEventLoop):
    """asyncio's own loop, noting each deadline whose timer fires instead of being cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.expired: list[str] = []

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,
                context: Any = None) -> asyncio.TimerHandle:
        name = getattr(callback, "__qualname__", "")
        if name not in DEADLINE_EXPIRIES:
            return super().call_at(when, callback, *args, context=context)
        delay = when - self.time()

        def fire(*args: Any) -> None:
            self.expired.append(f"{name}, set {delay:.1f} s ahead")
            callback(*args)

        return super().call_at(when, fire, *args, context=context)


def _expired_deadlines(world_size: int, body: Callable[[Any], Any]) -> tuple[list[Any], list[str]]:
    loop = DeadlineCountingLoop()
    try:
        results = loop.run_until_complete(run_ranks(world_size, body))
        return results, loop.expired
    finally:
        loop.close()


async def _one_all_reduce(world):
    x = np.full(4, world.rank + 1, dtype=np.int64)
    await world.all_reduce(x)
    return x.tolist()


async def _every_kind_of_frame(world):
    """Operations whose frames have payloads of every size, empty ones included."""
    x = np.full(4, world.rank + 1, dtype=np.float32)
    await world.all_reduce(x)
    await world.barrier()
    empty = np.zeros(0, dtype=np.float32)
    await world.broadcast(empty, src=0)
    big = np.full(1 << 18, world.rank + 1, dtype=np.float32)
    await world.all_reduce(big)
    return [x.tolist(), float(big[0])]


def test_two_ranks_and_one_all_reduce_expire_no_deadline(transport):
    results, expired = _expired_deadlines(2, _one_all_reduce)
    assert results == [[3, 3, 3, 3]] * 2
    assert expired == [], (f"on Python {sys.version.split()[0]}, the job's shutdown waited "
                           f"out these deadlines: {expired}")


def test_four_ranks_frames_of_every_size_expire_no_deadline(transport):
    results, expired = _expired_deadlines(4, _every_kind_of_frame)
    assert results == [[[10.0] * 4, 10.0]] * 4
    assert expired == [], (f"on Python {sys.version.split()[0]}, the job waited out these "
                           f"deadlines: {expired}")
