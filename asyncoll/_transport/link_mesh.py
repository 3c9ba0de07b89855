"""LinksMesh: a group's DirectLinks behind the algorithms' Mesh seam, every wait blocking.

The socket algorithms (recursive doubling, the binomial tree, the ring
all-gather) are coroutines written against a Team over a Mesh. Given a
LinksMesh, the awaitables its ``send`` and ``recv_into`` return block the
calling thread when awaited instead of suspending, so the same coroutine
runs to its end in one step (asyncoll._algorithms.team.run_here): the
algorithms are not written twice, and both paths compute the same bits.
Its ``send`` and ``recv_into`` are the links' own, with nothing between.

The links number their operations themselves and stamp every record with
the running one's fingerprint (DirectLinks.stamp): of a tag, only its step
goes on the wire, and the fingerprint passed is the stamped one.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol

from asyncoll._transport.base import Consumer, Tag
from asyncoll._wire.frames import NO_FINGERPRINT, Fingerprint


class DirectLinks(Protocol):
    """What a LinksMesh uses of asyncoll._transport.links.DirectLinks."""

    def send_tagged(self, index: int, tag: Tag, payload: memoryview,
                    fingerprint: Fingerprint = ...) -> Awaitable[None]:
        """Start sending the record of step ``tag[2]`` to member ``index``."""

    def post(self, index: int, step: int, out: memoryview) -> None:
        """Expect record ``step`` of the running operation from member ``index``."""

    def wait_received(self, index: int, step: int) -> None:
        """Block until the record posted for (``index``, ``step``) has arrived."""

    def flush(self) -> None:
        """Block until every record sent has left this process."""

#: What a wait that is over by the time it is awaited yields: nothing, ever. One,
#: exhausted, serves every await (a generator would be made for each).
_DONE: Generator[Any, None, None] = iter(())  # type: ignore[assignment]


class Flushed:
    """What a send returns: awaiting it blocks until every record sent has left (one
    serves every send of the links)."""

    __slots__ = ("_links",)

    def __init__(self, links: DirectLinks) -> None:
        self._links = links

    def __await__(self) -> Generator[Any, None, None]:
        self._links.flush()
        return _DONE


class Received:
    """A receive posted on the links as it is made; awaiting it blocks until the record
    is in.

    Args:
        links: the links to post it on.
        index: the member the record comes from.
        tag: the record's tag (of which only the step counts: the links number
            their operations themselves).
        room: where the payload goes.
        fingerprint: not used: the links check every record against the stamped one.
        consume: handed the payload whole, once it is in ``room``.
    """

    __slots__ = ("_consume", "_index", "_links", "_room", "_step")

    def __init__(self, links: DirectLinks, index: int, tag: Tag, room: memoryview,
                 fingerprint: Fingerprint = NO_FINGERPRINT,
                 consume: Consumer | None = None) -> None:
        self._links, self._index, self._step = links, index, tag[2]
        self._room, self._consume = room, consume
        links.post(index, self._step, room)

    def __await__(self) -> Generator[Any, None, None]:
        self._links.wait_received(self._index, self._step)
        if self._consume is not None:
            self._consume(0, self._room)  # the whole payload, in one part
        return _DONE


class LinksMesh:
    """DirectLinks as a Mesh whose peers are the links' member indices.

    Its ``send`` and ``recv_into`` are the links' own send (DirectLinks.send_tagged)
    and :class:`Received`, not methods that call them: a team's every record goes
    straight to the links.

    Args:
        links: the group's links.
        rank: this member's index on them.
        size: how many members they connect.
    """

    def __init__(self, links: DirectLinks, rank: int, size: int) -> None:
        self.links = links
        self.rank = rank
        self.size = size
        #: Start sending step ``tag[2]``'s record to member ``peer``: (peer, tag, payload,
        #: fingerprint) -> what awaiting waits for every record sent to leave.
        self.send: Callable[..., Awaitable[None]] = links.send_tagged
        #: Post the receive of step ``tag[2]``'s record from member ``peer``: (peer, tag,
        #: out, fingerprint, consume) -> what awaiting waits for it. With ``consume``, the
        #: payload lands in ``out`` and is then handed to it whole.
        self.recv_into: Callable[..., Awaitable[None]] = functools.partial(Received, links)
