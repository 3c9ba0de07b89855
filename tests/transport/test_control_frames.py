"""ABORT frames (send_control) reach a peer whose connection is still coming up.

A member that breaks a group tells the others with an ABORT frame. Where it
had just begun its first operation with a peer, the connection it dialed for
it may not be ready yet; the operation's own frames fail with the group, but
the ABORT must still go once the connection is up, or the peer's later call
on the group waits out its timeout for data that never comes.

Two real meshes on loopback, no session above them: a listener records what
each receives.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll._transport.tcp.peer_state import PeerState
from asyncoll.errors import AbortedError, AsyncollError, PeerLostError

from loopback_pair import loopback_pair  # tests/transport/loopback_pair.py

pytestmark = pytest.mark.timeout(30)

GROUP = 7


class Told:
    """A listener that records the ABORT frames the mesh received."""

    def __init__(self) -> None:
        self.aborts: asyncio.Queue[tuple[int, tuple[int, int, int], bytes]] = asyncio.Queue()

    def control_received(self, peer: int, tag: tuple[int, int, int], payload: bytes) -> None:
        self.aborts.put_nowait((peer, tag, payload))

    def early_frame(self, peer: int, tag: tuple[int, int, int], fingerprint: object) -> None:
        pass

    def peer_departed(self, peer: int, hostname: str) -> AsyncollError:
        return PeerLostError(f"rank {peer} on {hostname} left", rank=peer)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[TcpMesh, TcpMesh, Told]]:
    zero, one = await loopback_pair()
    told = Told()
    one.listener = told  # type: ignore[assignment]
    try:
        yield zero, one, told
    finally:
        await zero.close()
        await one.close()


async def test_an_abort_sent_while_the_connection_is_dialed_arrives_once_it_is_up(pair):
    zero, one, told = pair
    # Rank 0 begins an operation with rank 1: the send dials (lower ranks dial).
    sending = zero.send(1, (GROUP, 1, 0), memoryview(np.ones(4, dtype=np.uint8)))
    assert zero._peers[1].connection is None or not zero._peers[1].connection.ready.done()
    # ...and breaks the group before the connection is ready: its frame fails,
    # the ABORT waits for the connection.
    zero.fail_channel(GROUP, AbortedError("group 7 was aborted"))
    zero.send_control(1, (GROUP, 1, 0), memoryview(b"aborted"))
    with pytest.raises(AbortedError):
        await asyncio.wait_for(sending, 5)

    peer, tag, payload = await asyncio.wait_for(told.aborts.get(), 5)

    assert (peer, tag, payload) == (0, (GROUP, 1, 0), b"aborted")


async def test_an_abort_to_a_connected_peer_goes_ahead_of_a_close_right_after(pair):
    zero, one, told = pair
    data = np.ones(4, dtype=np.uint8)
    await asyncio.wait_for(asyncio.gather(zero.send(1, (0, 1, 0), memoryview(data)),
                                          one.recv_into(0, (0, 1, 0), memoryview(data))), 5)

    zero.send_control(1, (GROUP, 2, 0), memoryview(b"now"))
    await zero.close()  # at once: the ABORT was queued on the connection already

    peer, tag, payload = await asyncio.wait_for(told.aborts.get(), 5)
    assert (peer, tag, payload) == (0, (GROUP, 2, 0), b"now")


async def test_an_abort_waits_for_a_connection_no_longer_than_its_limit():
    state = PeerState(inbox=None)  # type: ignore[arg-type]  # never read: nothing settles
    waited = asyncio.ensure_future(state.send_control_when_ready((GROUP, 1, 0), b"x", 0.05))

    await asyncio.wait_for(waited, 5)

    assert waited.result() is None and state.connection is None
