"""Closed is not broken, and a monitored barrier's timeout names who did not arrive."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from asyncoll.errors import ClosedError, CollectiveTimeoutError, PeerLostError
from asyncoll.testing import run_ranks

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
    async def body(world):
        if world.rank == 1:
            await asyncio.sleep(2.5)  # never calls it
            return None
        with pytest.raises(CollectiveTimeoutError) as info:
            await world.monitored_barrier(timeout=1.0)
        return str(info.value)

    message = (await run_ranks(2, body))[0]
    assert "ranks 1 did not arrive" in message, message
    assert message.endswith(". Timed out waiting 1000ms"), message
