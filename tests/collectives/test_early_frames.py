"""Frames a peer sends before this rank asks for them are kept, up to a bound.

Past ASYNCOLL_MAX_EARLY_BYTES of early frames from one peer, while this rank
waits for nothing from it, this rank stops reading from it: the sender is
slowed by TCP's flow control (or its shared-memory ring filling). A receive
posted then reads on, whatever its frame is behind; no byte is lost or reordered.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from asyncoll.testing import run_ranks
from handshake import until

pytestmark = pytest.mark.timeout(60)

LIMIT = 256 << 10
MESSAGE = 64 << 10
COUNT = 48  # 3 MiB in all: twelve times the bound


async def test_early_frames_stay_within_the_bound_and_all_arrive_in_order(monkeypatch,
                                                                         transport):
    monkeypatch.setenv("ASYNCOLL_MAX_EARLY_BYTES", str(LIMIT))

    async def body(world):
        if world.rank == 0:
            sends = [asyncio.ensure_future(world.send(np.full(MESSAGE, i % 251, np.uint8), 1))
                     for i in range(COUNT)]
            await asyncio.gather(*sends)
            return None
        inbox = world.session.mesh.inbox(0)
        held = []
        for _ in range(20):  # rank 0 sends all the while; nothing is received yet
            await asyncio.sleep(0.05)
            held.append(inbox.kept_bytes)
        got = []
        for _ in range(COUNT):
            out = np.zeros(MESSAGE, np.uint8)
            await world.recv(out, 0)
            got.append(int(out[0]) if (out == out[0]).all() else -1)
        return held, got, inbox.kept_bytes

    held, got, left = (await run_ranks(2, body))[1]
    # Frames already read when reading stops still complete: one over TCP; over the
    # shared-memory ring, whose pieces of concurrent sends interleave, a few.
    in_flight = MESSAGE if transport == "tcp" else 4 * MESSAGE
    assert max(held) > 0, "no frame arrived early: the test did not test the bound"
    assert max(held) <= LIMIT + in_flight, f"early frames held {max(held)} bytes"
    assert got == [i % 251 for i in range(COUNT)]
    assert left == 0


async def test_a_receive_for_a_frame_behind_the_bound_still_completes(monkeypatch):
    monkeypatch.setenv("ASYNCOLL_MAX_EARLY_BYTES", str(LIMIT))

    async def body(world):
        if world.rank == 0:
            sends = [asyncio.ensure_future(world.send(np.full(MESSAGE, 1, np.uint8), 1, tag=1))
                     for _ in range(COUNT)]
            await world.send(np.full(8, 2, np.uint8), 1, tag=2)
            await asyncio.gather(*sends)
            return None
        inbox = world.session.mesh.inbox(0)
        await until(lambda: inbox.kept_bytes > LIMIT, "rank 1's reading stopping at the bound")
        last = np.zeros(8, np.uint8)
        await world.recv(last, 0, tag=2)  # sent after all of tag 1: behind the bound
        firsts = []
        for _ in range(COUNT):
            out = np.zeros(MESSAGE, np.uint8)
            await world.recv(out, 0, tag=1)
            firsts.append(bool((out == 1).all()))
        return last.tolist(), all(firsts)

    assert (await run_ranks(2, body))[1] == ([2] * 8, True)
