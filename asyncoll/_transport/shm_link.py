"""The shared-memory side of one same-host data connection (see shm.py).

A PeerConnection hands this link the SHM_* frames it receives and, for a
large payload to a same-host peer, the payload itself. The first such send
makes the ring and offers it (SHM_OPEN); until the peer has mapped it
(SHM_OPENED "ok") sends wait, and if the peer cannot map it every payload
keeps going over TCP.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asyncoll._transport import shm
from asyncoll._transport.base import Consumer, Tag, consume_into
from asyncoll._wire.frames import (
    MAX_FRAME_BYTES,
    SHM_FREED,
    SHM_PIECE,
    Fingerprint,
    FrameHeader,
    FrameKind,
)
from asyncoll.errors import AsyncollError, ProtocolError

if TYPE_CHECKING:
    from asyncoll._transport.connection import PeerConnection
    from asyncoll._transport.mesh import TcpMesh

log = logging.getLogger("asyncoll.transport")


@dataclass(slots=True)
class _Partial:
    """A payload whose pieces are arriving: where they go, and for whom."""

    out: memoryview | None  # None: the receive failed; pieces are only freed
    receive: asyncio.Future[None] | None  # None: kept for a receive not posted yet
    kept: bytearray | None
    fingerprint: Fingerprint
    consume: Consumer | None = None  # takes the pieces instead of ``out``
    filled: int = 0


class ShmLink:
    """Shared-memory payloads to and from the peer of one connection."""

    def __init__(self, connection: PeerConnection, mesh: TcpMesh) -> None:
        self._connection = connection
        self._mesh = mesh
        self._outbox: shm.Outbox | None = None
        self._pending: shm.Outbox | None = None  # offered, not mapped by the peer yet
        self._opening: asyncio.Future[shm.Outbox | None] | None = None
        self._offered = ""
        self._inbox: memoryview | None = None
        self._partials: dict[Tag, _Partial] = {}

    # -- sending ------------------------------------------------------------------

    async def send(self, tag: Tag, payload: memoryview, fingerprint: Fingerprint) -> None:
        """Send ``payload`` through the ring, piece by piece; over TCP if there is none."""
        outbox = self._outbox or await self._open()
        if outbox is None:
            await self._connection.send_frame(FrameKind.DATA, tag, payload, fingerprint)
            return
        total, offset = payload.nbytes, 0
        largest = outbox.space.largest_piece
        while offset < total:
            nbytes = min(total - offset, largest)
            place, end = await outbox.reserve(nbytes, tag[0])
            outbox.view[place:place + nbytes] = payload[offset:offset + nbytes]
            self._connection.send_frame(FrameKind.SHM_DATA, tag, memoryview(
                SHM_PIECE.pack(total, offset, place, nbytes, end)), fingerprint)
            offset += nbytes

    async def _open(self) -> shm.Outbox | None:
        if self._opening is None:
            self._opening = self._mesh.loop.create_future()
            name = shm.new_name()
            try:
                segment = shm.create(name, self._mesh.settings.shm_ring_bytes)
            except OSError as exc:
                log.info("no shared memory for rank %s (%s); using TCP", self._connection.peer,
                         exc)
                self._opening.set_result(None)
            else:
                self._offered = name
                self._pending = shm.Outbox(name, segment)
                self._connection.send_frame(FrameKind.SHM_OPEN, (0, 0, 0), memoryview(
                    f"{name}\n{len(segment)}".encode()))
        return await asyncio.shield(self._opening)

    def on_opened(self, answer: bytes) -> None:
        """The peer mapped the ring offered (``b"ok"``), or says why it could not."""
        if self._opening is None or self._opening.done():
            raise ProtocolError("unexpected SHM_OPENED frame")
        if answer == b"ok":
            self._outbox = self._pending
        else:
            shm.unlink(self._offered)
            log.info("rank %s cannot map this rank's shared memory (%s); using TCP",
                     self._connection.peer, answer.decode(errors="replace"))
        self._opening.set_result(self._outbox)

    def on_free(self, payload: bytes) -> None:
        """The peer is done with the ring up to the position in ``payload``."""
        if self._outbox is None or len(payload) != SHM_FREED.size:
            raise ProtocolError("unexpected SHM_FREE frame")
        self._outbox.freed(SHM_FREED.unpack(payload)[0])

    # -- receiving ----------------------------------------------------------------

    def on_open(self, offer: bytes) -> None:
        """The peer offers its ring for payloads to this rank: map it, then answer."""
        if self._inbox is not None:
            raise ProtocolError("a second SHM_OPEN frame on one connection")
        name, _, size = offer.decode(errors="replace").partition("\n")
        try:
            self._inbox = memoryview(shm.attach(name, int(size)))
            answer = b"ok"
        except (OSError, ValueError) as exc:
            answer = str(exc).encode()[:200] or b"refused"
        self._notify(FrameKind.SHM_OPENED, answer)

    def on_data(self, header: FrameHeader, descriptor: bytes) -> None:
        """Copy one piece out of the peer's ring, free it, and finish its payload."""
        inbox = self._inbox
        if inbox is None or len(descriptor) != SHM_PIECE.size:
            raise ProtocolError("unexpected SHM_DATA frame")
        total, offset, place, nbytes, end = SHM_PIECE.unpack(descriptor)
        tag = (header.group, header.seq, header.step)
        partial = self._partials.get(tag)
        if (total > MAX_FRAME_BYTES or not 0 < nbytes <= total - offset
                or place + nbytes > inbox.nbytes
                or offset != (0 if partial is None else partial.filled)):
            raise ProtocolError(f"a SHM_DATA descriptor out of bounds for frame {tag}: piece "
                                f"of {nbytes} bytes at {offset} of {total}, ring offset "
                                f"{place} of {inbox.nbytes}")
        if partial is None:
            partial = self._partials[tag] = self._start(tag, total, header.fingerprint)
        receive = partial.receive
        if partial.out is not None and not (receive is not None and receive.done()):
            if partial.consume is not None:
                if not consume_into(partial.consume, offset, inbox[place:place + nbytes],
                                    receive):
                    partial.out = None  # failed: the rest is only freed
            else:
                partial.out[offset:offset + nbytes] = inbox[place:place + nbytes]
        partial.filled += nbytes
        self._notify(FrameKind.SHM_FREE, SHM_FREED.pack(end))
        if partial.filled < total:
            return
        del self._partials[tag]
        if receive is not None:
            if not receive.done():
                receive.set_result(None)
        elif partial.out is not None and partial.kept is not None:
            assert self._connection.peer is not None
            self._mesh.keep_unexpected(self._connection.peer, tag, partial.kept,
                                       partial.fingerprint)

    def _notify(self, kind: FrameKind, payload: bytes) -> None:
        # Nothing to tell a peer this rank has said goodbye to, or lost.
        if self._connection.writable:
            self._connection.send_frame(kind, (0, 0, 0), memoryview(payload))

    def _start(self, tag: Tag, total: int, fingerprint: Fingerprint) -> _Partial:
        peer = self._connection.peer
        assert peer is not None
        posted = self._mesh.take_posted(peer, tag)
        if posted is None:
            kept = bytearray(total)
            return _Partial(memoryview(kept), None, kept, fingerprint)
        out, receive, expected, consume = posted
        if expected != fingerprint:
            receive.set_exception(self._mesh.desync(peer, tag, expected, fingerprint))
            return _Partial(None, receive, None, fingerprint)
        if out.nbytes != total:
            receive.set_exception(self._mesh.size_mismatch(peer, tag, total, out.nbytes))
            return _Partial(None, receive, None, fingerprint)
        return _Partial(out, receive, None, fingerprint, consume)

    # -- failure ------------------------------------------------------------------

    def fail(self, error: AsyncollError, group: int | None = None) -> None:
        """Fail the receives and the waits for ring space of ``group`` (None: all).

        Without a group the connection is gone: senders waiting for the peer to
        map the ring fail too, and an offered ring it never mapped is unlinked.
        """
        for tag, partial in self._partials.items():
            if group is not None and tag[0] != group:
                continue
            if partial.receive is not None and not partial.receive.done():
                partial.receive.set_exception(error)
            # Its remaining pieces, if any come, are freed and dropped.
            partial.out = None
            partial.kept = None
        if self._outbox is not None:
            self._outbox.fail(error, group)
        if group is not None:
            return
        if self._opening is not None and not self._opening.done():
            shm.unlink(self._offered)
            self._opening.set_exception(error)
            self._opening.exception()  # retrieved: no sender may be waiting
