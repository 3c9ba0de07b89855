"""The mesh's keepalive: a peer that reads nothing is lost after the deadline; one that
answers, or tells it is alive while it reads nothing, is not; a peer not awaited is not
judged.

Two real meshes on loopback; "frozen" is the peer's side of the connection
no longer read (a stopped process reads nothing either), and each test
drives the probes as the session's ticks do.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll.errors import AsyncollError, PeerLostError

from loopback_pair import loopback_pair  # tests/transport/loopback_pair.py

pytestmark = pytest.mark.timeout(30)

DEADLINE = 0.4
TICK = 0.05


class Told:
    """A listener that records the peers the mesh declared lost."""

    def __init__(self) -> None:
        self.lost: list[tuple[int, AsyncollError]] = []

    def peer_lost(self, peer: int, error: AsyncollError) -> None:
        self.lost.append((peer, error))


@pytest.fixture
async def pair() -> AsyncIterator[tuple[TcpMesh, TcpMesh, Told]]:
    zero, one = await loopback_pair()
    told = Told()
    zero.listener = told  # type: ignore[assignment]
    data = np.ones(4, dtype=np.uint8)
    await asyncio.wait_for(asyncio.gather(zero.send(1, (0, 1, 0), memoryview(data)),
                                          one.recv_into(0, (0, 1, 0), memoryview(data))), 5)
    try:
        yield zero, one, told
    finally:
        await zero.close()
        await one.close()


def connection_of(mesh: TcpMesh, peer: int):  # type: ignore[no-untyped-def]
    connection = mesh._peers[peer].connection
    assert connection is not None and connection.transport is not None
    return connection


async def probe_for(seconds: float, *meshes: TcpMesh) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for mesh in meshes:
            mesh.probe(DEADLINE, 2 * TICK)
        await asyncio.sleep(TICK)


@pytest.mark.parametrize("how", ["receive", "noted"])
async def test_an_awaited_peer_that_reads_nothing_is_lost_after_the_deadline(pair, how):
    zero, one, told = pair
    connection_of(one, 0).transport.pause_reading()  # frozen: it reads, and answers, nothing
    received = zero.recv_into(1, (0, 2, 0), memoryview(bytearray(4)))
    if how == "noted":
        received.cancel()  # a wait in another thread names the peer instead
    started = time.monotonic()
    while not told.lost and time.monotonic() - started < 10 * DEADLINE:
        if how == "noted":
            zero.awaiting(1)
        zero.probe(DEADLINE, 2 * TICK)
        await asyncio.sleep(TICK)
    waited = time.monotonic() - started
    assert [peer for peer, _ in told.lost] == [1]
    assert DEADLINE <= waited <= DEADLINE + 4 * TICK + 0.5, waited
    error = told.lost[0][1]
    assert isinstance(error, PeerLostError) and error.rank == 1
    assert "rank 1 on host b" in str(error) and "keepalive" in str(error)
    if how == "receive":
        with pytest.raises(PeerLostError):
            await received


async def test_an_awaited_peer_that_answers_is_not_lost(pair):
    zero, one, told = pair
    out = bytearray(4)
    received = zero.recv_into(1, (0, 2, 0), memoryview(out))
    await probe_for(4 * DEADLINE, zero)  # one is late, but its loop runs and answers
    assert told.lost == [] and not received.done()
    await asyncio.wait_for(one.send(0, (0, 2, 0), memoryview(bytes([7] * 4))), 5)
    await asyncio.wait_for(received, 5)
    assert out == bytes([7] * 4)


async def test_a_peer_that_stopped_reading_this_rank_tells_it_is_alive(pair):
    zero, one, told = pair
    # Its inbox is full, so it reads nothing from zero, PINGs included: its ticks
    # send PONGs unasked.
    connection_of(one, 0).read_from_peer(False)
    received = zero.recv_into(1, (0, 2, 0), memoryview(bytearray(4)))
    await probe_for(4 * DEADLINE, zero, one)
    assert told.lost == [] and not received.done()
    received.cancel()


async def test_a_peer_nobody_waits_for_is_not_judged(pair):
    zero, one, told = pair
    connection_of(one, 0).transport.pause_reading()
    await probe_for(4 * DEADLINE, zero)
    assert told.lost == []
