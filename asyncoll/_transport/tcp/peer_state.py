"""What a process's mesh (asyncoll._transport.tcp.mesh) knows about each peer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from asyncoll._transport.inbox import Inbox
from asyncoll._transport.tcp.connection import PeerConnection
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
