"""What a process's mesh (asyncoll._transport.tcp.mesh) knows about each peer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from asyncoll._compat import timeout as timeout_after
from asyncoll._transport.inbox import Inbox
from asyncoll._transport.tcp.connection import PeerConnection
from asyncoll._wire.frames import FrameKind
from asyncoll.errors import AsyncollError

#: How the mesh learns the (host, port) of a peer whose port the directory left
#: out: the session asks the coordinator (asyncoll._rendezvous.directory).
Resolve = Callable[[int], Awaitable[tuple[str, int]]]


@dataclass(slots=True)
class PeerState:
    """Everything this process knows about one peer."""

    inbox: Inbox
    address: tuple[str, int] | None = None
    hostname: str = "?"
    connection: PeerConnection | None = None
    dialing: asyncio.Task[None] | None = None
    #: The peer sent GOODBYE: its connection closing is a departure, not a loss.
    leaving: bool = False
    #: The peer runs on this host: large payloads may go through shared memory.
    same_host: bool = False
    #: Set once the connection is usable, or once the peer has failed.
    settled: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def error(self) -> AsyncollError | None:
        """The peer's failure (sticky), or None."""
        return self.inbox.error

    def fail(self, error: AsyncollError, channel: int | None = None) -> None:
        """Fail every receive and send with this peer (of channel ``channel``), now and later.

        The one fan-out of a failure: the inbox's receives (posted, arriving,
        later), the sends waiting on the connection or for ring space, and a
        handshake not done yet.
        """
        self.inbox.fail(error, channel)
        connection = self.connection
        if connection is not None:
            connection.fail_sends(self.inbox.error or error, channel)
        if channel is not None:
            return
        self.settled.set()
        if connection is not None and not connection.ready.done():
            connection.ready.set_exception(self.inbox.error or error)
            connection.ready.exception()  # mark retrieved: the dialer may be gone

    def send_control(self, tag: tuple[int, int, int], payload: memoryview
                     ) -> Awaitable[None] | None:
        """Send an ABORT frame about ``tag`` now, if the connection can carry it (None if
        not): its writes come before any frame sent after."""
        connection = self.connection
        if (self.error is None and connection is not None and connection.ready.done()
                and connection.writable):
            return connection.send_frame(FrameKind.ABORT, tag, payload)
        return None

    async def send_control_when_ready(self, tag: tuple[int, int, int], payload: bytes,
                                      limit: float) -> None:
        """:meth:`send_control` once the connection is usable (or the peer has failed),
        waiting at most ``limit`` seconds for it."""
        try:
            async with timeout_after(limit):
                await self.settled.wait()
        except TimeoutError:
            return
        sent = self.send_control(tag, memoryview(payload))
        if sent is not None:
            await sent
