"""Ranks that call different collectives, or the same one differently, fail loudly.

Every case runs on 2 and 3 ranks in one loop. The rank given the odd
arguments is the last one. Every rank must raise MismatchError from the
mismatched call (or, on a rank whose own part completed before anyone could
tell, GroupBrokenError caused by it from its next call on the group), and
the message must name the field that differs. Nothing may hang: each call
has a short timeout that a hang would turn into CollectiveTimeoutError.
"""

from __future__ import annotations

import numpy as np
import pytest

from asyncoll import ReduceOp
from asyncoll.errors import GroupBrokenError, MismatchError
from asyncoll.testing import run_ranks
from handshake import until

pytestmark = pytest.mark.timeout(60)


CASES = {
    "different operation": (
        lambda w, odd: w.broadcast(np.ones(4, np.float32), 0) if odd else
        w.all_reduce(np.ones(4, np.float32)), "operation: "),
    "different shape": (
        lambda w, odd: w.all_reduce(np.ones(5 if odd else 4, np.float32)), "element count: "),
    "different dtype": (
        lambda w, odd: w.all_reduce(np.ones(4, np.int32 if odd else np.float32)), "dtype: "),
    "different reduce op": (
        lambda w, odd: w.all_reduce(np.ones(4, np.float32),
                                    op=ReduceOp.MAX if odd else ReduceOp.SUM), "reduce op: "),
    "different root": (
        lambda w, odd: w.broadcast(np.ones(4, np.float32), w.size - 1 if odd else 0), "root: "),
    "different algorithm": (
        lambda w, odd: w.all_reduce(np.ones(4, np.float32),
                                    algorithm="ring" if odd else "recursive_doubling"),
        "algorithm: "),
    "empty on one rank": (
        lambda w, odd: w.all_reduce(np.ones(0 if odd else 4, np.float32)), "element count: "),
}


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("case", list(CASES))
async def test_mismatched_call_raises_mismatch_naming_the_field_on_every_rank(case, world_size):
    call, field = CASES[case]

    async def body(world):
        odd = world.rank == world.size - 1
        x = np.ones(3, np.float32)
        await world.all_reduce(x)  # a good operation first: connections are up
        try:
            await call(world, odd)
        except MismatchError as exc:
            return str(exc)
        # This rank's part completed before the disagreement was seen: the
        # group is broken by then, and says why on the next call.
        with pytest.raises(GroupBrokenError) as later:
            await world.all_reduce(x, timeout=10)
        assert isinstance(later.value.__cause__, MismatchError)
        return str(later.value)

    messages = await run_ranks(world_size, body, op_timeout=10)
    for rank, message in enumerate(messages):
        assert field in message, f"rank {rank}: {message}"


async def test_one_rank_calling_one_collective_more_fails_every_rank():
    async def body(world):
        x = np.ones(4, np.float32)
        await world.all_reduce(x)
        with pytest.raises((MismatchError, GroupBrokenError)) as info:
            if world.rank == 1:
                await world.all_reduce(x, timeout=10)  # one more than rank 0 calls
            await world.barrier(timeout=10)
        return info.value

    for error in await run_ranks(2, body, op_timeout=10):
        mismatch = error if isinstance(error, MismatchError) else error.__cause__
        assert isinstance(mismatch, MismatchError)
        # Whichever rank notices first words it from its side.
        assert ("operation: all_reduce on rank 1, barrier on rank 0" in str(mismatch)
                or "operation: barrier on rank 0, all_reduce on rank 1" in str(mismatch))


async def test_data_for_an_operation_this_rank_completed_names_the_differing_argument(
        transport):
    """A root that finished its broadcast before the other root's data came still names it.

    Rank 0 broadcasts from itself and completes at once; rank 2, calling the
    same operation with root 2, sends its data later. Rank 0 must still say
    which argument differed (the root), not only that data came unexpected.
    """
    # Over an arena a broadcast's root waits for every member: there rank 2 comes
    # once rank 0 is in it.
    waits_for_all = transport in ("arena", "hierarchy")
    faults = {}

    def rank_0_broadcast() -> bool:
        running, completed = faults[0].progress(0)
        return completed >= 2 or (waits_for_all and running == 2)

    async def body(world):
        faults[world.rank] = world.session.faults
        x = np.ones(4, np.float32)
        await world.all_reduce(x)
        with pytest.raises((MismatchError, GroupBrokenError)) as info:
            if world.rank == 2:
                await until(rank_0_broadcast, "rank 0's broadcast (operation #2)")
            await world.broadcast(x, 2 if world.rank == 2 else 0, timeout=10)
            await world.all_reduce(x, timeout=10)
        return info.value

    errors = await run_ranks(3, body, op_timeout=10)
    first = errors[0] if isinstance(errors[0], MismatchError) else errors[0].__cause__
    assert isinstance(first, MismatchError)
    # Rank 0 words it, or another rank did first and told rank 0 (its abort).
    assert "root: " in str(first) and "on rank 2" in str(first), str(first)
