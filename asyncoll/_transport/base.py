"""The seams of the transport: what algorithms call (Mesh), and whom it tells (Listener)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import AsyncollError

#: (channel, sequence number, step): what a frame belongs to. The channel is a
#: number the layer above chooses (a group's id, say); the transport only compares it.
Tag = tuple[int, int, int]
#: Takes a received payload part by part: (byte offset in the payload, bytes).
Consumer = Callable[[int, memoryview], None]


def consume_into(consume: Consumer, offset: int, data: memoryview,
                 receive: asyncio.Future[None] | None) -> bool:
    """Hand ``data`` to ``consume``; if it raises, fail ``receive`` with the error.

    Consumers run inside the transport's callbacks, where an exception would
    break the connection instead of reaching the operation that posted them.
    """
    try:
        consume(offset, data)
    except Exception as exc:
        if receive is not None and not receive.done():
            receive.set_exception(exc)
        return False
    return True


class Mesh(Protocol):
    """What an algorithm needs from the data plane: three methods and two numbers.

    ``send`` and ``recv_into`` register their work at once and return an
    awaitable, so an algorithm can post a receive, start a send and then wait
    for both without creating tasks.
    """

    @property
    def rank(self) -> int:
        """This process's global rank."""

    @property
    def size(self) -> int:
        """The number of ranks in the job."""

    def send(self, peer: int, tag: Tag, payload: memoryview,
             fingerprint: Fingerprint = ...) -> Awaitable[None]:
        """Send ``payload`` (bytes) to global rank ``peer``; done when it may be reused.

        ``fingerprint`` says which operation the frame belongs to.
        """

    def recv_into(self, peer: int, tag: Tag, out: memoryview,
                  fingerprint: Fingerprint = ..., consume: Consumer | None = None
                  ) -> Awaitable[None]:
        """Receive the frame ``tag`` from ``peer`` into ``out``, which it must fill exactly.

        With ``consume``, every byte of the payload is handed to it instead,
        exactly once and in order, as parts (offsets are multiples of 64), and
        ``out`` is only room the transport may use on the way: a transport
        that holds the payload in memory the receiver can read (shared memory)
        lets an algorithm reduce straight out of it, without copying it first.
        A frame whose fingerprint differs fails the receive with MismatchError.
        """


class Listener(Protocol):
    """What a transport tells the layer above about its peers (the group layer listens).

    The transport knows peers and tags; what a tag's channel or operation
    stands for, what a lost peer breaks, and how a frame that does not fit
    its receive is explained to the user, is decided above it.
    """

    def early_frame(self, peer: int, tag: Tag, fingerprint: Fingerprint) -> None:
        """A frame from ``peer`` arrived before its receive was posted, and is kept."""

    def control_received(self, peer: int, tag: Tag, payload: bytes) -> None:
        """``peer`` sent a control frame (an ABORT) about the operation of ``tag``."""

    def peer_lost(self, peer: int, error: AsyncollError) -> None:
        """``peer``'s connection broke without a goodbye; its receives already failed."""

    def frame_mismatched(self, peer: int, tag: Tag, mine: Fingerprint,
                         theirs: Fingerprint) -> AsyncollError:
        """``peer`` sent frame ``tag`` with fingerprint ``theirs`` to a receive posted
        with ``mine``: the error that receive fails with."""

    def frame_wrong_size(self, peer: int, tag: Tag, sent: int,
                         expected: int) -> AsyncollError:
        """``peer`` sent ``sent`` bytes as frame ``tag`` to a receive of ``expected``
        bytes: the error that receive fails with."""

    def peer_departed(self, peer: int, hostname: str) -> AsyncollError:
        """``peer`` (on ``hostname``) left the job: the error its receives still
        waiting fail with."""


class EarlyCount:
    """How many early frames the matchers sharing it keep: a carrier's answer, per
    operation, to whether any frame waits for its receive, without asking every peer's."""

    __slots__ = ("frames",)

    def __init__(self) -> None:
        self.frames = 0


class MeshControl(Mesh, Protocol):
    """What the group layer needs of a transport beyond the seam: failures and ABORTs.

    Every tag's first field names a *channel*; the transport fails a
    channel's sends and receives on request without knowing what it stands for.
    """

    listener: Listener | None

    @property
    def has_early(self) -> bool:
        """Whether any frame is kept early, waiting for its receive."""

    @property
    def early_count(self) -> EarlyCount:
        """The count behind :attr:`has_early`, for the fast path's every call to read."""

    def early(self, channel: int) -> list[tuple[int, Tag, Fingerprint]]:
        """(peer, tag, fingerprint) of every frame of channel ``channel`` kept early."""

    def send_control(self, peer: int, tag: Tag, payload: memoryview) -> None:
        """Send an ABORT frame about ``tag`` to ``peer`` if connected; best effort."""

    def watch(self, peer: int, tag: Tag) -> asyncio.Future[int]:
        """A future for frame ``tag`` from ``peer`` having arrived (kept early), taking
        nothing: it resolves with the frame's arrival stamp (larger for later
        arrivals), and a receive posted afterwards gets the frame."""

    def fail_channel(self, channel: int, error: AsyncollError) -> None:
        """Fail every send and receive of channel ``channel``, pending and later (sticky)."""

    def fail_peer(self, peer: int, error: AsyncollError) -> None:
        """Fail every send and receive with ``peer``, pending and later (sticky)."""

    def peer_left(self, peer: int, hostname: str) -> None:
        """``peer`` left the job: fail what waits for it once nothing more can come."""

    def awaiting(self, peer: int) -> None:
        """A wait in another thread (a fast path's) waits for ``peer`` now, so that a
        keepalive may probe it; callable from any thread."""

    def hostname(self, peer: int) -> str:
        """The host name rank ``peer`` reported ("" when unknown)."""

    def peer_address(self, peer: int) -> tuple[str, int] | None:
        """The (host, port) rank ``peer`` advertised (None when unknown)."""
