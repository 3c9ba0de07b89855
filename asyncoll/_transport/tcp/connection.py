"""One TCP connection to a peer: framing, flow control and the handshake's state.

Receiving is a BufferedProtocol state machine: the event loop reads into a
64 KiB stage, from which headers are parsed and small payloads copied; the
rest of a larger payload is read straight into the destination array when
the peer's inbox has a receive for that frame, or into a new buffer that the
inbox keeps for the receive to come. Sending writes the header and then the
payload's memory itself, with no copy, and the send is done once the
transport has handed every byte to the kernel, so the caller may then reuse it.

What a frame means beyond its bytes is the owner's (the mesh): this class
tells it about handshakes, control frames, goodbyes and the connection's end
through :class:`ConnectionOwner`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable
from typing import Protocol, cast

from asyncoll._tls.handshake import looks_like_tls, plaintext_peer_words
from asyncoll._transport.tcp import handshake
from asyncoll._transport.base import Tag
from asyncoll._transport.inbox import Inbox, Receive
from asyncoll._transport.settings import TransportSettings
from asyncoll._transport.shm.link import ShmLink
from asyncoll._wire.frames import (
    HEADER_SIZE,
    MAX_CONTROL_PAYLOAD,
    NO_FINGERPRINT,
    SHM_FREED,
    SHM_PIECE,
    Fingerprint,
    FrameHeader,
    FrameKind,
    decode_abort,
    encode_abort,
    pack_header,
    unpack_header,
)
from asyncoll.errors import (
    AsyncollError,
    AuthenticationError,
    ProtocolError,
    error_from_code,
)

_DISCARD = memoryview(bytearray(1 << 16))
_NOWHERE = memoryview(b"")
_STAGE_BYTES = 1 << 16
_GATHER_LIMIT = 1 << 16
#: The largest payload of each shared-memory frame kind.
_SHM_SIZES = {FrameKind.SHM_OPEN: 256, FrameKind.SHM_OPENED: 256,
              FrameKind.SHM_DATA: SHM_PIECE.size, FrameKind.SHM_FREE: SHM_FREED.size}
#: The frame kinds that carry no payload.
_EMPTY = (FrameKind.GOODBYE, FrameKind.PING, FrameKind.PONG)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class ConnectionOwner(Protocol):
    """What a connection needs from the mesh that owns it."""

    loop: asyncio.AbstractEventLoop
    job: str
    settings: TransportSettings

    @property
    def rank(self) -> int:
        """This process's global rank (-1 before the directory is known)."""

    def inbox(self, peer: int) -> Inbox:
        """The inbox of ``peer``'s frames."""

    def accept_hello(self, connection: PeerConnection, peer: int) -> None:
        """Attach an accepted connection to ``peer``, or raise ProtocolError."""

    def connection_lost(self, connection: PeerConnection, exc: Exception | None) -> None:
        """The connection closed."""

    def protocol_failed(self, connection: PeerConnection, exc: AsyncollError) -> None:
        """The connection received something malformed, and is being aborted."""

    def error_for(self, peer: int | None) -> AsyncollError:
        """The error for operations on ``peer`` once its connection has failed."""

    def control_received(self, peer: int, tag: Tag, payload: bytes) -> None:
        """``peer`` sent an ABORT frame."""

    def goodbye_received(self, peer: int) -> None:
        """``peer`` said goodbye: its connection's end is a departure, not a loss."""


class PeerConnection(asyncio.BufferedProtocol):
    """The protocol instance of one data-plane connection (either direction)."""

    def __init__(self, owner: ConnectionOwner, peer: int | None) -> None:
        self._owner = owner
        #: The remote global rank; None on an accepted connection until its HELLO.
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        #: Resolved when the handshake is done (HELLO_ACK received, or HELLO accepted).
        self.ready: asyncio.Future[None] = owner.loop.create_future()
        #: Resolved when the connection has closed.
        self.closed: asyncio.Future[None] = owner.loop.create_future()
        # Received bytes land here while no payload is being read straight into
        # its destination; _staged of them are not handled yet.
        self._stage = memoryview(bytearray(_STAGE_BYTES))
        self._staged = 0
        #: The frame whose payload is being received, if any.
        self._frame: FrameHeader | None = None
        #: Where its remaining payload bytes go, and how many remain.
        self._target = _NOWHERE
        self._remaining = 0
        #: The receive the payload goes to, or the buffer keeping it for one to come.
        self._receive: Receive | None = None
        self._kept: bytearray | None = None
        self._nonce = ""
        self._paused = False
        self._drained = owner.loop.create_future()
        self._drained.set_result(None)
        self._drain_waiters: list[asyncio.Future[None]] = []
        #: This rank said goodbye and shut its writing side down.
        self.half_closed = False
        #: Reads from the peer so far: the keepalive's sign of life (a count, not a
        #: clock, as it grows on every read).
        self.reads = 0
        #: Whether this rank reads the peer's frames (False: its inbox is full).
        self.reading = True
        #: Payloads through shared memory, when the peer is on this host.
        self.shm = ShmLink(self, owner.loop, owner.settings.shm_ring_bytes)

    @property
    def inbox(self) -> Inbox:
        """The inbox of the peer's frames (once the peer is known)."""
        assert self.peer is not None
        return self._owner.inbox(self.peer)

    # -- sending ------------------------------------------------------------------

    def send_frame(self, kind: FrameKind, tag: Tag, payload: memoryview,
                   fingerprint: Fingerprint = NO_FINGERPRINT) -> Awaitable[None]:
        """Write one frame; the returned awaitable is done when ``payload`` may be reused."""
        transport = self.transport
        if transport is None or not self.writable:
            return self._failed(self._owner.error_for(self.peer))
        channel, seq, step = tag
        header = pack_header(kind, channel, seq, step, payload.nbytes, fingerprint)
        if not payload.nbytes:
            # Never an empty part in writelines: asyncio's own loop on Python
            # 3.12 and 3.13 (before CPython gh-155888) keeps it in its buffer for
            # ever, spinning on the socket and never finishing a close.
            transport.write(header)
        elif payload.nbytes <= _GATHER_LIMIT:
            # One call for both, so a small frame leaves in one segment. (uvloop
            # gathers the buffers with writev; asyncio's own loop may join them,
            # which is why large payloads go separately.)
            transport.writelines((header, payload))
        else:
            transport.write(header)
            transport.write(payload)
        if not self._paused:
            return self._drained
        waiter = self._owner.loop.create_future()
        self._drain_waiters.append(waiter)
        return waiter

    def send_empty(self, kind: FrameKind) -> None:
        """Send a frame of ``kind`` without payload (a PING, a PONG) if writable; best effort."""
        if self.writable:
            sent = self.send_frame(kind, (0, 0, 0), _NOWHERE)
            # Nobody waits for it, and its failure must not be logged as unretrieved.
            cast(asyncio.Future[None], sent).add_done_callback(_retrieve)

    @property
    def writable(self) -> bool:
        """Whether frames can still be written (not closed, not half-closed by a goodbye)."""
        return (self.transport is not None and not self.transport.is_closing()
                and not self.half_closed)

    @property
    def stalled(self) -> bool:
        """Whether sends wait for the peer to take this rank's bytes."""
        return self._paused and bool(self._drain_waiters)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def fail_sends(self, error: AsyncollError, channel: int | None = None) -> None:
        """Fail the sends waiting on this connection (of ``channel``; all: the peer is gone).

        Without a channel they are the sends waiting for the transport to take
        their bytes: a peer cut off without a reset never acknowledges them,
        and they would wait for the operation's deadline.
        """
        self.shm.fail(error, channel)
        if channel is not None:
            return
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)

    def read_from_peer(self, go: bool) -> None:
        """Resume (True) or pause (False) reading: the inbox's bound on early frames."""
        if self.transport is None or self.transport.is_closing():
            return
        self.reading = go
        try:
            if go:
                self.transport.resume_reading()
            else:
                self.transport.pause_reading()
        except AttributeError:
            # Python 3.10's TLS transport (asyncio's sslproto before its 3.11
            # rewrite) is not yet closing when the connection under it is gone,
            # and raises this instead: there is nothing left to read from.
            return

    # -- receiving ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport implements asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Pause as soon as anything is queued, so a send is reported done only
        # when its bytes have left the payload's memory. (TLS pauses at a size
        # >= high, not > high, and would stay paused with nothing queued at 0;
        # what it holds is encrypted, so the payload is free once it is taken.)
        tls = self._owner.settings.tls is not None
        self.transport.set_write_buffer_limits(high=1 if tls else 0, low=0)
        if self.peer is None:
            # Accepted: challenge the dialer before anything else.
            self._nonce = handshake.new_nonce()
            self.send_frame(FrameKind.CHALLENGE, (0, 0, 0), memoryview(self._nonce.encode()))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return self._stage[self._staged:]
        self._drop_if_failed()
        return self._target

    def buffer_updated(self, nbytes: int) -> None:
        self.reads += 1
        try:
            if self._frame is None:
                self._staged += nbytes
                self._parse_stage()
            else:
                self._fill(nbytes)
        except AsyncollError as exc:
            self._abort(exc)

    def _drop_if_failed(self) -> None:
        receive = self._receive
        if receive is not None and receive.failed:
            # The receive failed or was cancelled (its channel failed, its operation
            # timed out): stop writing into the caller's array, discard the rest.
            self._receive = None
            self._discard()

    def _fill(self, nbytes: int) -> None:
        """``nbytes`` more of the current payload are in place at the start of the target."""
        self._remaining -= nbytes
        self._target = self._target[nbytes:]
        if not self._remaining:
            self._finish_frame()
        elif not self._target:
            self._discard()  # the discard buffer is full: reuse it

    def _parse_stage(self) -> None:
        """Handle every complete header, and the payload bytes after it, in the stage.

        Headers are read into the stage along with whatever follows them, so a
        small frame costs one read; a payload's bytes past the stage are then
        read straight into its destination (get_buffer returns the target).
        """
        stage, end, pos = self._stage, self._staged, 0
        while True:
            if self._frame is None:
                if end - pos < HEADER_SIZE:
                    break
                if self.peer is None and looks_like_tls(bytes(stage[pos:pos + 2])):
                    raise ProtocolError(plaintext_peer_words("a data connection"))
                self._start_frame(unpack_header(stage[pos:pos + HEADER_SIZE]))
                pos += HEADER_SIZE
            else:
                take = min(self._remaining, end - pos)
                if not take:
                    break
                self._drop_if_failed()
                self._target[:take] = stage[pos:pos + take]
                pos += take
                self._fill(take)
        # Only part of a header can be left over: keep it at the stage's start.
        left = end - pos
        if left and pos:
            stage[:left] = stage[pos:end]
        self._staged = left

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        self._owner.connection_lost(self, exc)
        error = self._owner.error_for(self.peer)
        self.fail_sends(error)
        # Nothing comes or goes through the rings any more: unmap them now, not when
        # the garbage collector finds the connection.
        self.shm.close(error)

    def _start_frame(self, header: FrameHeader) -> None:
        self._frame = header
        self._remaining = header.nbytes
        kind = header.kind
        if kind is FrameKind.DATA and self.peer is not None and self.ready.done():
            self._start_data(header)
        elif kind in (FrameKind.HELLO_ACK, FrameKind.CHALLENGE):
            limit = (handshake.MAX_ACK_BYTES if kind is FrameKind.HELLO_ACK
                     else handshake.MAX_CHALLENGE_BYTES)
            if self.peer is None or self.ready.done() or header.nbytes > limit:
                raise ProtocolError(f"unexpected {kind.name} frame")
            self._keep(header.nbytes)
        elif kind is FrameKind.HELLO:
            if self.peer is not None or header.nbytes > MAX_CONTROL_PAYLOAD:
                raise ProtocolError("unexpected HELLO frame")
            self._keep(header.nbytes)
        elif self.peer is None:
            raise ProtocolError(f"a {kind.name} frame arrived before the handshake")
        elif kind is FrameKind.ABORT:
            if header.nbytes > MAX_CONTROL_PAYLOAD:
                raise ProtocolError(f"ABORT frame of {header.nbytes} bytes")
            self._keep(header.nbytes)
        elif kind in _EMPTY:
            if header.nbytes:
                raise ProtocolError(f"{kind.name} frame of {header.nbytes} bytes")
        elif kind in _SHM_SIZES:
            if header.nbytes > _SHM_SIZES[kind]:
                raise ProtocolError(f"{kind.name} frame of {header.nbytes} bytes")
            self._keep(header.nbytes)
        else:
            raise ProtocolError(f"unexpected {kind.name} frame after the handshake")
        if not self._remaining:
            self._finish_frame()

    def _start_data(self, header: FrameHeader) -> None:
        receive = self.inbox.match((header.channel, header.seq, header.step), header.nbytes,
                                   header.fingerprint)
        if receive is None:
            self._keep(header.nbytes)
        elif receive.failed:
            self._discard()  # it does not fit: the receive has its error
        else:
            self._target, self._receive = receive.out, receive

    def _finish_frame(self) -> None:
        header = self._frame
        assert header is not None
        kind, kept = header.kind, self._kept
        if kind is FrameKind.DATA:
            if self._receive is not None:
                self._receive.complete_in_place()
            elif kept is not None:
                self.inbox.arrived((header.channel, header.seq, header.step), kept,
                                   header.fingerprint)
        elif kind in _SHM_SIZES:
            assert kept is not None
            self._shm_frame(header, bytes(kept))
        elif kind is FrameKind.GOODBYE:
            assert self.peer is not None
            self._owner.goodbye_received(self.peer)
        elif kind is FrameKind.PING:
            self.send_empty(FrameKind.PONG)
        elif kind is FrameKind.PONG:
            pass  # its arrival was the point (self.reads)
        else:
            assert kept is not None
            self._control_frame(header, bytes(kept))
        self._reset()

    def _control_frame(self, header: FrameHeader, payload: bytes) -> None:
        owner = self._owner
        if header.kind is FrameKind.CHALLENGE:
            assert self.peer is not None
            hello, self._nonce = handshake.hello(owner.settings.token, owner.job, owner.rank,
                                                 payload.decode(errors="replace"))
            self.send_frame(FrameKind.HELLO, (0, 0, owner.rank), memoryview(hello))
        elif header.kind is FrameKind.HELLO:
            peer = header.step
            their_nonce = handshake.check_hello(owner.settings.token, owner.job, payload, peer,
                                                self._nonce)
            owner.accept_hello(self, peer)
            self.peer = peer
            ack = handshake.ack(owner.settings.token, owner.job, peer, their_nonce)
            self.send_frame(FrameKind.HELLO_ACK, (0, 0, 0), memoryview(ack))
            self.ready.set_result(None)
        elif header.kind is FrameKind.HELLO_ACK:
            assert self.peer is not None
            try:
                handshake.check_ack(owner.settings.token, owner.job, owner.rank, self._nonce,
                                    payload, self.peer)
            except AuthenticationError as exc:
                self.ready.set_exception(exc)
            else:
                self.ready.set_result(None)
        elif not self.ready.done():
            # An ABORT during the handshake: refused (a wrong secret); the dial fails with it.
            code, _, message = decode_abort(payload)
            self.ready.set_exception(error_from_code(code, f"rank {self.peer} refused this "
                                                           f"rank's data connection: {message}"))
        else:
            assert self.peer is not None
            owner.control_received(self.peer, (header.channel, header.seq, header.step),
                                   payload)

    def _shm_frame(self, header: FrameHeader, payload: bytes) -> None:
        if header.kind is FrameKind.SHM_DATA:
            self.shm.on_data(header, payload, self.inbox)
        elif header.kind is FrameKind.SHM_FREE:
            self.shm.on_free(payload)
        elif header.kind is FrameKind.SHM_OPEN:
            self.shm.on_open(payload)
        else:
            self.shm.on_opened(payload)

    def _keep(self, nbytes: int) -> None:
        self._kept = bytearray(nbytes)
        self._target = memoryview(self._kept)

    def _discard(self) -> None:
        self._target = _DISCARD[:min(self._remaining, _DISCARD.nbytes)]

    def _reset(self) -> None:
        self._frame = None
        self._receive = None
        self._kept = None
        self._target = _NOWHERE
        self._remaining = 0

    def _abort(self, exc: AsyncollError) -> None:
        self._owner.protocol_failed(self, exc)
        if self.transport is None:
            return
        if isinstance(exc, AuthenticationError) and not self.transport.is_closing():
            # Say why before closing, so the dialer reports a wrong secret, not a loss.
            self.send_frame(FrameKind.ABORT, (0, 0, 0), memoryview(
                encode_abort("authentication", str(exc))))
            self.transport.close()
            return
        self.transport.abort()

    def _failed(self, error: AsyncollError) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self._owner.loop.create_future()
        future.set_exception(error)
        return future
