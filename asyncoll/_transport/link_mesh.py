"""LinksMesh: a group's DirectLinks behind the algorithms' Mesh seam, every wait blocking.

The socket algorithms (recursive doubling, the binomial tree, the ring
all-gather) are coroutines written against a Team over a Mesh. Given a
LinksMesh, the awaitables its ``send`` and ``recv_into`` return block the
calling thread when awaited instead of suspending, so the same coroutine
runs to its end within one ``send(None)`` (asyncoll._algorithms.team.run_here):
the algorithms are not written twice, and both paths compute the same bits.

The links number their operations themselves and stamp every record with
the running one's fingerprint (DirectLinks.stamp): of a tag, only its step
goes on the wire, and the fingerprint passed is the stamped one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from typing import Any, Protocol

from asyncoll._transport.base import Consumer, Tag
from asyncoll._wire.frames import NO_FINGERPRINT, Fingerprint


class DirectLinks(Protocol):
    """What a LinksMesh uses of asyncoll._transport.links.DirectLinks."""

    def send(self, index: int, step: int, payload: memoryview) -> None:
        """Start sending a record to member ``index``."""

    def post(self, index: int, step: int, out: memoryview) -> None:
        """Expect record ``step`` of the running operation from member ``index``."""

    def wait_received(self, index: int, step: int) -> None:
        """Block until the record posted for (``index``, ``step``) has arrived."""

    def flush(self) -> None:
        """Block until every record sent has left this process."""

#: What a wait that is over by the time it is awaited yields: nothing, ever. One,
#: exhausted, serves every await (a generator would be made for each).
_DONE: Generator[Any, None, None] = iter(())  # type: ignore[assignment]


class _Flushed:
    """What ``send`` returns: awaiting it blocks until every record sent has left."""

    __slots__ = ("_links",)

    def __init__(self, links: DirectLinks) -> None:
        self._links = links

    def __await__(self) -> Generator[Any, None, None]:
        self._links.flush()
        return _DONE


class _Received:
    """What ``recv_into`` returns: awaiting it blocks until the record is in."""

    __slots__ = ("_consume", "_index", "_links", "_room", "_step")

    def __init__(self, links: DirectLinks, index: int, step: int, room: memoryview,
                 consume: Consumer | None) -> None:
        self._links, self._index, self._step = links, index, step
        self._room, self._consume = room, consume

    def __await__(self) -> Generator[Any, None, None]:
        self._links.wait_received(self._index, self._step)
        if self._consume is not None:
            self._consume(0, self._room)  # the whole payload, in one part
        return _DONE


class LinksMesh:
    """DirectLinks as a Mesh whose peers are the links' member indices.

    Args:
        links: the group's links.
        rank: this member's index on them.
        size: how many members they connect.
    """

    def __init__(self, links: DirectLinks, rank: int, size: int) -> None:
        self.links = links
        self.rank = rank
        self.size = size
        self._flushed = _Flushed(links)

    def send(self, peer: int, tag: Tag, payload: memoryview,
             fingerprint: Fingerprint = NO_FINGERPRINT) -> Awaitable[None]:
        """Start sending step ``tag[2]``'s record to member ``peer``; awaiting the result
        waits for every record sent to leave."""
        self.links.send(peer, tag[2], payload)
        return self._flushed

    def recv_into(self, peer: int, tag: Tag, out: memoryview,
                  fingerprint: Fingerprint = NO_FINGERPRINT,
                  consume: Consumer | None = None) -> Awaitable[None]:
        """Post the receive of step ``tag[2]``'s record from member ``peer`` into ``out``.

        With ``consume``, the payload lands in ``out`` and is then handed to it whole.
        """
        step = tag[2]
        self.links.post(peer, step, out)
        return _Received(self.links, peer, step, out, consume)
