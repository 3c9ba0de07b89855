"""recv without src: the first message with the tag from any member, losing and reordering none.

A receive from any source watches every peer's next frame and takes a count only for
the one whose frame arrived first (asyncoll._group.point_to_point); these tests race
senders against it, cancel it, let it time out, and call named receives after it.
"""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from asyncoll.errors import CollectiveTimeoutError
from asyncoll.testing import run_ranks
from handshake import after, until

pytestmark = pytest.mark.timeout(60)


async def test_recv_without_src_takes_racing_senders_keeping_each_senders_order():
    per_sender = 6

    async def body(world):
        if world.rank == 0:
            got = []
            for _ in range(per_sender * (world.size - 1)):
                out = np.zeros(3, np.int64)
                sender = await world.recv(out, None, tag=3)
                assert (out == out[0]).all()
                got.append((sender, int(out[0])))
            return got
        rng = random.Random(world.rank)
        for k in range(per_sender):
            await asyncio.sleep(rng.random() * 0.02)
            await world.send(np.full(3, 100 * world.rank + k, np.int64), 0, tag=3)
        return None

    got = (await run_ranks(4, body))[0]
    for sender in (1, 2, 3):
        assert [value for s, value in got if s == sender] == [100 * sender + k
                                                              for k in range(per_sender)]


async def test_recv_without_src_takes_the_message_that_arrived_first():
    async def body(world):
        one = np.zeros(1, np.int64)
        if world.rank == 2:
            await world.send(np.array([2]), 0, tag=3)
            await world.send(np.array([0]), 0, tag=9)  # behind it on the same connection
        elif world.rank == 1:
            await world.recv(one, 0, tag=10)  # only once rank 2's message is at rank 0
            await world.send(np.array([1]), 0, tag=3)
            await world.send(np.array([0]), 0, tag=11)
        else:
            await world.recv(one, 2, tag=9)
            await world.send(np.array([0]), 1, tag=10)
            await world.recv(one, 1, tag=11)
            # Both messages with tag 3 are here now, rank 1's the later.
            order = []
            for _ in range(2):
                order.append(await world.recv(one, None, tag=3))
                assert int(one[0]) == order[-1]
            return order
        return None

    assert (await run_ranks(3, body))[0] == [2, 1]


async def test_named_recv_called_after_one_from_any_source_gets_the_next_message():
    both_waiting = asyncio.Event()

    async def body(world):
        if world.rank == 1:
            await after(both_waiting, "rank 0's two receives")
            for value in (1, 2):
                await world.send(np.array([value]), 0, tag=5)
            return None
        if world.rank == 2:
            return None
        first, second = np.zeros(1, np.int64), np.zeros(1, np.int64)
        any_source = asyncio.ensure_future(world.recv(first, None, tag=5))
        await asyncio.sleep(0)  # it is waiting for a sender before the next is called
        named = asyncio.ensure_future(world.recv(second, 1, tag=5))
        await asyncio.sleep(0)  # and so is this one, behind it
        assert not any_source.done() and not named.done()
        both_waiting.set()
        senders = await asyncio.gather(any_source, named)
        return senders, int(first[0]), int(second[0])

    assert (await run_ranks(3, body))[0] == ([1, 1], 1, 2)


async def test_recv_without_src_that_is_cancelled_or_times_out_loses_nothing():
    async def body(world):
        out = np.zeros(1, np.int64)
        if world.rank == 1:
            await world.recv(out, 0, tag=1)  # rank 0 gave up twice
            for value in (7, 8):
                await world.send(np.array([value]), 0, tag=4)
            return None
        waiting = asyncio.ensure_future(world.recv(out, None, tag=4))
        await asyncio.sleep(0)  # it is waiting for a sender when it is cancelled
        assert not waiting.done()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(CollectiveTimeoutError) as timed_out:
            await world.recv(out, None, tag=4, timeout=0.3)
        await world.send(np.zeros(1, np.int64), 1, tag=1)
        # Neither took a count: the first message is the next, from any source or named.
        sender = await world.recv(out, None, tag=4)
        first = int(out[0])
        await world.recv(out, 1, tag=4)
        return str(timed_out.value), sender, first, int(out[0])

    message, sender, first, second = (await run_ranks(2, body))[0]
    assert "recv from any of ranks [1] (tag 4) on group 0 did not complete within 0.3 s" \
        in message
    assert "Timed out waiting 300ms" in message
    assert (sender, first, second) == (1, 7, 8)


async def test_a_sender_that_leaves_drops_out_while_another_sender_is_awaited():
    faults = {}

    async def body(world):
        faults[world.rank] = world.session.faults
        out = np.zeros(1, np.int64)
        if world.rank == 1:
            await world.send(np.array([1]), 0, tag=2)
            await world.destroy()  # done sending: leaves the job
            return None
        if world.rank == 2:
            await until(lambda: faults[0].left(1) is not None, "rank 0 hearing rank 1 left")
            await world.send(np.array([2]), 0, tag=2)
            return None
        senders = []
        for _ in range(2):
            senders.append(await world.recv(out, None, tag=2))
        return senders

    assert (await run_ranks(3, body))[0] == [1, 2]
