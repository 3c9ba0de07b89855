"""send and recv: messages between two members of a group, outside its collectives.

Point-to-point frames carry the group id with the top bit set, so they
never match a collective's frames; the frame's seq counts the messages sent
to (or received from) that peer with that tag, and its step is the tag.
Both sides count in call order, so messages with one tag between one pair
arrive in the order they were sent, as MPI promises, with no negotiation.

A message that times out or is cancelled leaves the two counts out of step,
so it breaks the group's point-to-point channel here and on the peer
(sticky, like a collective's failure); the collectives are not affected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from asyncoll._algorithms.team import as_bytes
from asyncoll._compat import timeout as timeout_after
from asyncoll._group_context import Membership
from asyncoll._tensors import Buffer
from asyncoll._wire.dtypes import dtype_code
from asyncoll._wire.frames import Fingerprint, Operation
from asyncoll.errors import CollectiveError, CollectiveTimeoutError, broken_by

#: The largest tag a message may carry (the frame's 32-bit step).
MAX_TAG = (1 << 32) - 1
_CHANNEL_BIT = 1 << 31


def _fingerprint(data: np.ndarray) -> Fingerprint:
    return Fingerprint(Operation.SEND, dtype_code(data.dtype), elements=data.size)


class Messages:
    """The point-to-point channel of one group on this rank."""

    def __init__(self, session: Membership, group_id: int, ranks: Sequence[int]) -> None:
        self._session = session
        self._group_id = group_id
        self._channel = _CHANNEL_BIT | group_id
        session.faults.register(self._channel, ranks)
        self._sent: dict[tuple[int, int], int] = {}
        self._received: dict[tuple[int, int], int] = {}

    async def send(self, peer: int, tag: int, data: np.ndarray, limit: float) -> None:
        """Send ``data`` to global rank ``peer``; done when its memory may be reused."""
        count = self._sent[peer, tag] = self._sent.get((peer, tag), 0) + 1
        frame = (self._channel, count, tag)
        await self._transfer(f"send #{count} to rank {peer} (tag {tag})", peer, limit,
                             lambda: self._session.mesh.send(peer, frame, as_bytes(data),
                                                             _fingerprint(data)))

    async def recv(self, peer: int, tag: int, buffer: Buffer, limit: float) -> int:
        """Receive the next message from global rank ``peer`` with ``tag``; return ``peer``."""
        count = self._received[peer, tag] = self._received.get((peer, tag), 0) + 1
        frame = (self._channel, count, tag)
        await self._transfer(f"recv #{count} from rank {peer} (tag {tag})", peer, limit,
                             lambda: self._session.mesh.recv_into(
                                 peer, frame, as_bytes(buffer.flat), _fingerprint(buffer.flat)))
        buffer.write_back()
        return peer

    async def _transfer(self, what: str, peer: int, limit: float,
                        start: Callable[[], Awaitable[None]]) -> None:
        faults = self._session.faults
        self._session.ops += 1
        self._session.check_open(what)
        first = faults.error(self._channel)
        if first is not None:
            raise broken_by(f"point-to-point messages of group {self._group_id}",
                               first) from first
        try:
            async with timeout_after(limit) as deadline:
                await start()
        except TimeoutError:
            if not deadline.expired():
                raise
            error = CollectiveTimeoutError(f"{what} on group {self._group_id} did not "
                                           f"complete within {limit:g} s")
            faults.abort(self._channel, 0, error, (peer,))
            raise error from None
        except asyncio.CancelledError:
            faults.abort(self._channel, 0, CollectiveError(f"{what} was cancelled"),
                             (peer,))
            raise
