"""MemoryMesh: ranks of one process joined by direct calls, for tests.

A test double, so it lives with the tests and does not ship in the package
(asyncoll.testing is for users' tests, and its ranks are real peers).

A second implementation of the transport's seams (Mesh and MeshControl)
over the same per-peer :class:`~asyncoll._transport.inbox.Inbox`: a send
hands the payload straight to the receiving rank's inbox for the sender
(into the posted receive, or kept early). It proves that algorithms and the
group layer need nothing of TCP, and lets their tests run without sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from asyncoll._transport.base import Consumer, Listener, Tag
from asyncoll._transport.inbox import EarlyCount, Inbox
from asyncoll._wire.frames import NO_FINGERPRINT, Fingerprint
from asyncoll.errors import AsyncollError, PeerLostError


class MemoryMesh:
    """One rank's view of a set of ranks that live in this process."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank = rank
        self._size = size
        self.listener: Listener | None = None
        #: Every rank's mesh, shared by all of them (see :func:`memory_meshes`).
        self.ranks: list[MemoryMesh] = []
        self._early_count = EarlyCount()
        self._inboxes = {peer: Inbox(peer, lambda: self.listener, count=self._early_count)
                         for peer in range(size)}
        for inbox in self._inboxes.values():
            inbox.on_early = self._early_frame
        self._failed_channels: dict[int, AsyncollError] = {}
        self._lost: dict[int, AsyncollError] = {}

    @property
    def rank(self) -> int:
        """This rank."""
        return self._rank

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self._size

    def send(self, peer: int, tag: Tag, payload: memoryview,
             fingerprint: Fingerprint = NO_FINGERPRINT) -> Awaitable[None]:
        """Hand ``payload`` to ``peer``'s inbox for this rank; done at once."""
        error = self._failed_channels.get(tag[0]) or self._lost.get(peer)
        if error is not None:
            return _failed(error)
        inbox = self.ranks[peer]._inboxes[self._rank]
        receive = inbox.match(tag, payload.nbytes, fingerprint)
        if receive is None:
            inbox.arrived(tag, bytearray(payload), fingerprint)
        elif receive.put(0, payload):
            receive.finish()
        return _done()

    def recv_into(self, peer: int, tag: Tag, out: memoryview,
                  fingerprint: Fingerprint = NO_FINGERPRINT, consume: Consumer | None = None
                  ) -> Awaitable[None]:
        """Receive frame ``tag`` from ``peer`` into ``out`` (or to ``consume``)."""
        error = self._failed_channels.get(tag[0])
        if error is not None:
            return _failed(error)
        return self._inboxes[peer].post(tag, out, fingerprint, consume)

    def watch(self, peer: int, tag: Tag) -> asyncio.Future[int]:
        """A future for frame ``tag`` from ``peer`` having arrived, taking nothing."""
        error = self._failed_channels.get(tag[0])
        if error is not None:
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            future.set_exception(error)
            return future
        return self._inboxes[peer].watch(tag)

    @property
    def has_early(self) -> bool:
        """Whether any frame is kept early."""
        return self._early_count.frames > 0

    @property
    def early_count(self) -> EarlyCount:
        """The count behind has_early."""
        return self._early_count

    def early(self, channel: int) -> list[tuple[int, Tag, Fingerprint]]:
        """(peer, tag, fingerprint) of every early frame of channel ``channel``."""
        return [(peer, tag, fp) for peer, inbox in self._inboxes.items()
                for tag, fp in inbox.early(channel)]

    def send_control(self, peer: int, tag: Tag, payload: memoryview) -> None:
        """Deliver an ABORT frame to ``peer``'s listener, soon (as a connection would)."""
        target = self.ranks[peer]
        if peer != self._rank and peer not in self._lost and target.listener is not None:
            asyncio.get_running_loop().call_soon(target.listener.control_received,
                                                 self._rank, tag, bytes(payload))

    def fail_channel(self, channel: int, error: AsyncollError) -> None:
        """Fail every send and receive of channel ``channel``, pending and later."""
        self._failed_channels.setdefault(channel, error)
        for inbox in self._inboxes.values():
            inbox.fail(error, channel)

    def fail_peer(self, peer: int, error: AsyncollError) -> None:
        """Fail every send and receive with ``peer``, pending and later."""
        self._lost.setdefault(peer, error)
        self._inboxes[peer].fail(error)

    def peer_left(self, peer: int, hostname: str) -> None:
        """``peer`` left: every frame it sent is here already, so fail what waits for it."""
        self.fail_peer(peer, self._inboxes[peer].departed(hostname))

    def awaiting(self, peer: int) -> None:
        """Nothing to probe: a rank here is lost only by :meth:`lose`."""

    def peer_address(self, peer: int) -> tuple[str, int] | None:
        """No rank has a network address here."""
        return None

    def hostname(self, peer: int) -> str:
        """Every rank is on this host."""
        return "memory"

    def lose(self, peer: int) -> None:
        """Simulate ``peer``'s death, as its connection breaking would tell this rank."""
        error = PeerLostError(f"rank {peer} on host memory was lost", rank=peer, host="memory")
        self.fail_peer(peer, error)
        if self.listener is not None:
            self.listener.peer_lost(peer, error)

    def _early_frame(self, peer: int, tag: Tag, fingerprint: Fingerprint) -> None:
        if self.listener is not None:
            self.listener.early_frame(peer, tag, fingerprint)


def memory_meshes(size: int) -> list[MemoryMesh]:
    """``size`` ranks' meshes, joined to each other."""
    meshes = [MemoryMesh(rank, size) for rank in range(size)]
    for mesh in meshes:
        mesh.ranks = meshes
    return meshes


def _done() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def _failed(error: AsyncollError) -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future
