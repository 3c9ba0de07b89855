"""Sub-groups, ordering of concurrent operations, refusals and failures, in one loop."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from asyncoll import ReduceOp
from asyncoll.errors import (
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    GroupBrokenError,
    MismatchError,
    RendezvousTimeoutError,
)
from asyncoll.testing import run_ranks
from handshake import after, until

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("world_size, members", [(3, [0, 2]), (5, [1, 3, 4]), (4, [3, 1])])
async def test_sub_group_reduces_among_members_and_leaves_others_untouched(world_size,
                                                                           members):
    async def body(world):
        group = await world.new_group(members)
        x = np.array([world.rank + 1, 10 * (world.rank + 1)], dtype=np.float32)
        if world.rank in members:
            assert group.rank == members.index(world.rank)
            await group.all_reduce(x, op=ReduceOp.MAX)
        else:
            assert group.rank == -1
            with pytest.raises(ConfigurationError, match="not a member"):
                group.all_reduce(x)
        return x

    results = await run_ranks(world_size, body)
    top = max(members) + 1
    for rank, x in enumerate(results):
        expected = [top, 10 * top] if rank in members else [rank + 1, 10 * (rank + 1)]
        np.testing.assert_array_equal(x, expected)


async def test_many_operations_in_flight_on_two_groups_all_complete_correctly():
    async def body(world):
        evens = await world.new_group([0, 2])
        xs = [np.full(20_000 * i + 1, world.rank + i, dtype=np.int64) for i in range(6)]
        ys = [np.full(33, world.rank * (i + 1), dtype=np.int64) for i in range(4)]
        tasks = [asyncio.ensure_future(world.all_reduce(x)) for x in xs]
        if evens.rank >= 0:
            tasks += [asyncio.ensure_future(evens.all_reduce(y, op=ReduceOp.MAX)) for y in ys]
        await asyncio.gather(*tasks)
        return xs, ys

    results = await run_ranks(4, body)
    for rank, (xs, ys) in enumerate(results):
        for i, x in enumerate(xs):
            np.testing.assert_array_equal(x, np.full(20_000 * i + 1, sum(range(4)) + 4 * i))
        for i, y in enumerate(ys):
            expected = 2 * (i + 1) if rank in (0, 2) else rank * (i + 1)
            np.testing.assert_array_equal(y, np.full(33, expected))


async def test_new_group_with_different_members_raises_mismatch_on_every_rank():
    async def body(world):
        members = [0, 1] if world.rank == 2 else [0, 2]
        with pytest.raises(MismatchError) as info:
            await world.new_group(members)
        return str(info.value)

    for message in await run_ranks(3, body):
        assert "ranks 0, 1 passed [0, 2]" in message
        assert "ranks 2 passed [0, 1]" in message


async def test_new_group_that_one_rank_never_calls_times_out_naming_it():
    failed = []

    async def body(world):
        if world.rank == 1:
            await until(lambda: len(failed) == 2, "ranks 0 and 2 timing out")  # never calls
            return None
        with pytest.raises(RendezvousTimeoutError) as info:
            await world.new_group([0, 1], timeout=0.5)
        failed.append(world.rank)
        return str(info.value)

    messages = await run_ranks(3, body)
    for message in (messages[0], messages[2]):
        assert "ranks 1 did not arrive" in message


async def test_bad_input_is_refused_before_anything_is_sent():
    async def body(world):
        with pytest.raises(ConfigurationError, match="AVG needs a floating"):
            world.all_reduce(np.arange(4, dtype=np.int32), op=ReduceOp.AVG)
        with pytest.raises(ConfigurationError, match="BAND needs an integer"):
            world.all_reduce(np.ones(4, dtype=np.float64), op=ReduceOp.BAND)
        with pytest.raises(ConfigurationError, match="not defined on complex"):
            world.all_reduce(np.ones(4, dtype=np.complex64), op=ReduceOp.MAX)
        frozen = np.ones(4, dtype=np.float32)
        frozen.flags.writeable = False
        with pytest.raises(ConfigurationError, match="read-only"):
            world.all_reduce(frozen)
        with pytest.raises(ConfigurationError, match="share memory"):
            world.all_reduce(np.lib.stride_tricks.as_strided(np.zeros(1), (4,), (0,)))
        with pytest.raises(ConfigurationError, match="got list"):
            world.all_reduce([1.0, 2.0])
        with pytest.raises(ConfigurationError, match="reduce op 'sum'"):
            world.all_reduce(np.ones(2), op="sum")
        # Nothing was sent: the group is intact and the next call is operation #1.
        x = np.ones(3, dtype=np.int16)
        await world.all_reduce(x)
        return x

    for x in await run_ranks(2, body):
        np.testing.assert_array_equal(x, [2, 2, 2])


async def test_timeout_names_the_operation_and_later_calls_raise_group_broken():
    done = asyncio.Event()

    async def body(world):
        if world.rank == 1:
            await after(done, "rank 0's timeout and its next call")  # never calls it
            return None
        x = np.ones(8, dtype=np.float32)
        with pytest.raises(CollectiveTimeoutError, match=r"all_reduce #1 on group 0 .* still "
                           r"waiting for data from rank 1") as first:
            await world.all_reduce(x, timeout=0.3)
        # gloo's words, which torch's callers match with " (Timed out|closed|timeout) ".
        assert str(first.value).endswith("rank 1. Timed out waiting 300ms")
        with pytest.raises(GroupBrokenError) as later:
            await world.all_reduce(x)
        assert later.value.__cause__ is first.value
        done.set()
        return None

    await run_ranks(2, body)


async def test_peer_that_leaves_early_makes_the_others_fail_with_mismatch_not_hang():
    async def body(world):
        x = np.ones(1000, dtype=np.float64)
        await world.all_reduce(x)
        if world.rank == 2:
            await world.destroy()
            return None
        # One collective more than rank 2 called: nobody will ever answer it.
        with pytest.raises(MismatchError, match="rank 2 on .* left the job"):
            await world.all_reduce(x, timeout=20)
        return None

    await run_ranks(3, body)


async def test_barrier_waits_for_every_member():
    arrived: list[int] = []

    async def body(world):
        await asyncio.sleep(0.2 * world.rank)
        arrived.append(world.rank)
        await world.barrier()
        return len(arrived)

    assert await run_ranks(3, body) == [3, 3, 3]


async def test_torch_tensors_are_reduced_in_place_including_non_contiguous_ones():
    torch = pytest.importorskip("torch")

    async def body(world):
        t = torch.tensor([world.rank + 1.0, world.rank + 2.0])
        storage = t.data_ptr()
        await world.all_reduce(t)
        m = torch.arange(4).reshape(2, 2).t() * (world.rank + 1)  # non-contiguous
        await world.all_reduce(m)
        assert t.data_ptr() == storage
        return t.tolist(), m.tolist()

    for t, m in await run_ranks(2, body):
        assert t == [3.0, 5.0]
        assert m == [[0, 6], [3, 9]]  # gloo gives a wrong answer here


async def test_cancelled_operation_breaks_the_group_on_the_other_members():
    async def body(world):
        faults = world.session.faults
        x = np.ones(10, dtype=np.float32)
        await world.all_reduce(x)  # connects the pair
        if world.rank == 0:
            task = asyncio.ensure_future(world.all_reduce(x))
            await until(lambda: faults.progress(0)[0] == 2, "operation #2 beginning")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return None
        await until(lambda: faults.error(0) is not None, "rank 0's word of the cancellation")
        # Operation #2 itself fails of the cancellation here too, though rank 0's
        # word came before it began; the group is broken for every later one.
        with pytest.raises(CollectiveError) as info:
            await world.all_reduce(x, timeout=20)
        assert not isinstance(info.value, GroupBrokenError)
        with pytest.raises(GroupBrokenError) as later:
            await world.all_reduce(x, timeout=20)
        assert str(later.value.__cause__) == str(info.value)
        return str(info.value)

    assert "all_reduce #2 on group 0 was cancelled on rank 0" in (await run_ranks(2, body))[1]
