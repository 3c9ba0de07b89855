"""Closed is not broken, and a monitored barrier's timeout names who did not arrive."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from asyncoll._transport.shm import segment

from asyncoll.errors import (
    ClosedError,
    CollectiveTimeoutError,
    ConfigurationError,
    MonitoredBarrierError,
    PeerLostError,
)
from asyncoll.testing import run_ranks
from handshake import after, until

pytestmark = pytest.mark.timeout(60)


async def test_world_used_after_its_own_destroy_raises_closed_not_peer_lost():
    async def body(world):
        x = np.ones(4, dtype=np.float32)
        await world.all_reduce(x)
        pair = await world.new_group([0, 1])
        await world.barrier()
        if world.rank == 1:
            return None
        await world.destroy()
        errors = []
        for call in (lambda: world.all_reduce(x), lambda: pair.all_reduce(x),
                     lambda: world.send(x, 1), lambda: world.barrier()):
            with pytest.raises(ClosedError) as info:
                await call()
            errors.append(info.value)
        return errors

    errors = (await run_ranks(2, body))[0]
    for error in errors:
        assert not isinstance(error, PeerLostError)
        assert "destroyed its process group" in str(error)


async def test_monitored_barrier_timeout_names_the_rank_that_never_arrived():
    timed_out = asyncio.Event()

    async def body(world):
        if world.rank == 1:
            await after(timed_out, "rank 0's timeout")  # never calls it
            return None
        with pytest.raises(CollectiveTimeoutError) as info:
            await world.monitored_barrier(timeout=1.0)
        timed_out.set()
        return str(info.value)

    message = (await run_ranks(2, body))[0]
    assert "ranks 1 did not arrive" in message, message
    assert message.endswith(". Timed out waiting 1000ms"), message


async def test_monitored_barrier_by_first_passes_then_names_the_first_late_member_as_gloo():
    # torch's monitored_barrier on the torch backend (gloo's algorithm and words):
    # member 0 names the first member that did not arrive; member 1, which did,
    # learns that something failed while it waited for member 0's answer.
    failed = []

    async def body(world):
        group = await world.new_group([0, 1, 2])
        await group.monitored_barrier_by_first(10.0)
        await group.monitored_barrier_by_first(10.0, wait_all_ranks=True)
        if world.rank == 2:
            await until(lambda: len(failed) == 2, "ranks 0 and 1 failing")  # never calls it
            return None
        with pytest.raises(MonitoredBarrierError) as info:
            await group.monitored_barrier_by_first(0.5)
        failed.append(world.rank)
        assert isinstance(info.value, RuntimeError)
        return str(info.value)

    messages = await run_ranks(3, body)
    assert "[Rank 0]: Rank 2 failed to pass monitoredBarrier in 500 ms" in messages[0]
    assert messages[1].startswith("Rank 1 successfully reached monitoredBarrier, but received "
                                  "errors while waiting for send/recv from rank 0")


async def test_monitored_barrier_by_first_with_wait_all_ranks_names_every_late_member():
    named = asyncio.Event()

    async def body(world):
        if world.rank != 0:
            await after(named, "rank 0's failure")  # never calls it
            return None
        with pytest.raises(MonitoredBarrierError) as info:
            await world.monitored_barrier_by_first(0.3, wait_all_ranks=True)
        named.set()
        first = str(info.value)
        return first

    message = (await run_ranks(3, body))[0]
    assert "[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 300 ms" in message


async def test_monitored_barrier_by_first_with_no_time_fails_at_once_on_member_0():
    async def body(world):
        if world.rank != 0:
            return None
        with pytest.raises(MonitoredBarrierError, match="Rank 0 timed out in monitoredBarrier"):
            await world.monitored_barrier_by_first(0)
        with pytest.raises(ConfigurationError, match="0 or more seconds"):
            await world.monitored_barrier_by_first(-1)
        return None

    await run_ranks(2, body)


async def test_a_destroyed_group_refuses_calls_with_closed_and_gives_its_arena_back_at_once(
        transport):
    async def body(world):
        x = np.ones(4, dtype=np.float32)
        await world.all_reduce(x)  # the world's own arena, and the rings between the ranks
        await world.barrier()
        before = segment.held()
        pair = await world.new_group([0, 1])
        await pair.all_reduce(x)
        await world.barrier()
        during = segment.held()
        await world.barrier()  # both counted before either destroys it
        await pair.destroy()
        await pair.destroy()  # twice is harmless
        with pytest.raises(ClosedError, match="was destroyed on this rank"):
            await pair.all_reduce(x)
        await world.barrier()
        after = segment.held()
        y = np.full(4, world.rank + 1.0, dtype=np.float32)
        await world.all_reduce(y)  # the world goes on
        return before, during, after, y

    results = await run_ranks(2, body)
    # Both ranks share this process: rank 0 counts after the barriers, for both.
    before, during, after, _ = results[0]
    if transport == "arena":
        assert during[0] >= before[0] + 2, (before, during)  # each rank maps the group's
    assert after == before, (before, during, after)
    assert all(np.all(y == 3) for *_, y in results)


async def test_destroying_a_group_stops_its_operation_waiting_in_another_thread_with_closed():
    async def body(world):
        pair = await world.new_group([0, 1])
        x = np.ones(4, dtype=np.float32)
        await pair.all_reduce(x)  # sets its fast path up (an arena, or direct links)
        await world.barrier()
        if world.rank == 1:
            await world.barrier()
            return None
        # Rank 1 never joins it: it waits (in the group's thread, on the fast path).
        waiting = asyncio.ensure_future(pair.all_reduce(x, timeout=60))
        faults = world.session.faults
        await until(lambda: faults.progress(pair.group_id)[0] == 2,
                    "the pair's operation #2 beginning")
        assert not waiting.done()
        started = time.monotonic()
        await pair.destroy()
        with pytest.raises(ClosedError, match="was destroyed on this rank"):
            await waiting
        took = time.monotonic() - started
        await world.barrier()
        return took

    took = (await run_ranks(2, body))[0]
    # Ended by the close, at the wait's next check, not by its 60 s deadline.
    assert took < 30, took
