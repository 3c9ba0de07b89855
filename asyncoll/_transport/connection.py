"""One TCP connection to a peer, speaking the data-frame protocol.

Receiving is a BufferedProtocol state machine: the event loop reads into a
64 KiB stage, from which headers are parsed and small payloads copied; the
rest of a larger payload is read straight into the destination array when a
receive for that frame is already posted, or into a new buffer kept for the
receive that will come. Sending writes the header and
then the payload's memory itself, with no copy, and the send is done once the
transport has handed every byte to the kernel, so the caller may then reuse it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable
from typing import TYPE_CHECKING, cast

from asyncoll import _auth
from asyncoll._transport.base import Consumer, Tag, consume_into
from asyncoll._transport.shm_link import ShmLink
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
from asyncoll.errors import AsyncollError, AuthenticationError, ProtocolError, error_from_code

if TYPE_CHECKING:
    from asyncoll._transport.mesh import TcpMesh

_DISCARD = memoryview(bytearray(1 << 16))
_NOWHERE = memoryview(b"")
_STAGE_BYTES = 1 << 16
_GATHER_LIMIT = 1 << 16
#: The largest payload of each shared-memory frame kind.
_SHM_SIZES = {FrameKind.SHM_OPEN: 256, FrameKind.SHM_OPENED: 256,
              FrameKind.SHM_DATA: SHM_PIECE.size, FrameKind.SHM_FREE: SHM_FREED.size}


class PeerConnection(asyncio.BufferedProtocol):
    """The protocol instance of one data-plane connection (either direction)."""

    def __init__(self, mesh: TcpMesh, peer: int | None) -> None:
        self._mesh = mesh
        #: The remote global rank; None on an accepted connection until its HELLO.
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        #: Resolved when the handshake is done (HELLO_ACK received, or HELLO accepted).
        self.ready: asyncio.Future[None] = mesh.loop.create_future()
        #: Resolved when the connection has closed.
        self.closed: asyncio.Future[None] = mesh.loop.create_future()
        # Received bytes land here while no payload is being read straight into
        # its destination; _staged of them are not handled yet.
        self._stage = memoryview(bytearray(_STAGE_BYTES))
        self._staged = 0
        #: The frame whose payload is being received, if any.
        self._frame: FrameHeader | None = None
        #: Where its remaining payload bytes go, and how many remain.
        self._target = _NOWHERE
        self._remaining = 0
        self._receive: asyncio.Future[None] | None = None
        #: What takes the payload once it is in the destination, if not the destination.
        self._consume: tuple[Consumer, int, memoryview] | None = None
        self._kept: bytearray | None = None
        self._nonce = ""
        self._paused = False
        self._drained = mesh.loop.create_future()
        self._drained.set_result(None)
        self._drain_waiters: list[asyncio.Future[None]] = []
        #: This rank said goodbye and shut its writing side down.
        self.half_closed = False
        #: Payloads through shared memory, when the peer is on this host.
        self.shm = ShmLink(self, mesh)

    # -- sending ------------------------------------------------------------------

    def send_frame(self, kind: FrameKind, tag: Tag, payload: memoryview,
                   fingerprint: Fingerprint = NO_FINGERPRINT) -> Awaitable[None]:
        """Write one frame; the returned awaitable is done when ``payload`` may be reused."""
        transport = self.transport
        if transport is None or not self.writable:
            return self._mesh.failed(self.peer)
        group, seq, step = tag
        header = pack_header(kind, group, seq, step, payload.nbytes, fingerprint)
        if payload.nbytes <= _GATHER_LIMIT:
            # One call for both, so a small frame leaves in one segment. (uvloop
            # gathers the buffers with writev; asyncio's own loop may join them,
            # which is why large payloads go separately.)
            transport.writelines((header, payload))
        else:
            transport.write(header)
            transport.write(payload)
        if not self._paused:
            return self._drained
        waiter = self._mesh.loop.create_future()
        self._drain_waiters.append(waiter)
        return waiter

    @property
    def writable(self) -> bool:
        """Whether frames can still be written (not closed, not half-closed by a goodbye)."""
        return (self.transport is not None and not self.transport.is_closing()
                and not self.half_closed)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- receiving ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport implements asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Pause as soon as anything is queued, so a send is reported done only
        # when its bytes have left the payload's memory.
        self.transport.set_write_buffer_limits(high=0)
        if self.peer is None:
            # Accepted: challenge the dialer before anything else.
            self._nonce = _auth.new_nonce()
            self.send_frame(FrameKind.CHALLENGE, (0, 0, 0), memoryview(self._nonce.encode()))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return self._stage[self._staged:]
        receive = self._receive
        if receive is not None and receive.done():
            # The receive was cancelled (its operation timed out): stop writing
            # into the caller's array and throw the rest of the payload away.
            self._receive = None
            self._discard()
        return self._target

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._frame is None:
                self._staged += nbytes
                self._parse_stage()
            else:
                self._fill(nbytes)
        except AsyncollError as exc:
            self._abort(exc)

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
                self._start_frame(unpack_header(stage[pos:pos + HEADER_SIZE]))
                pos += HEADER_SIZE
            else:
                take = min(self._remaining, end - pos)
                if not take:
                    break
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
        self._mesh.connection_lost(self, exc)
        self.fail_receive(self._mesh.error_for(self.peer))
        self.fail_sends()

    def fail_receive(self, error: AsyncollError, group: int | None = None) -> None:
        """Fail the receive whose payload is arriving now (of ``group``, if given).

        Its tag has left the mesh's posted receives when its header arrived,
        so failing the channel or the group would not reach it otherwise.
        """
        self.shm.fail(error, group)
        receive, frame = self._receive, self._frame
        if receive is None or receive.done() or frame is None:
            return
        if group is None or frame.group == group:
            receive.set_exception(error)
            self._receive = None
            self._discard()

    def _start_frame(self, header: FrameHeader) -> None:
        self._frame = header
        self._remaining = header.nbytes
        if header.kind is FrameKind.HELLO_ACK:
            if self.peer is None or self.ready.done() or header.nbytes > 128:
                raise ProtocolError("unexpected HELLO_ACK frame")
            self._keep(header.nbytes)
        elif header.kind is FrameKind.HELLO:
            if self.peer is not None or header.nbytes > MAX_CONTROL_PAYLOAD:
                raise ProtocolError("unexpected HELLO frame")
            self._keep(header.nbytes)
        elif header.kind is FrameKind.CHALLENGE:
            if self.peer is None or self.ready.done() or header.nbytes > 64:
                raise ProtocolError("unexpected CHALLENGE frame")
            self._keep(header.nbytes)
        elif self.peer is None:
            raise ProtocolError(f"a {header.kind.name} frame arrived before the handshake")
        elif header.kind is FrameKind.ABORT:
            if header.nbytes > MAX_CONTROL_PAYLOAD:
                raise ProtocolError(f"ABORT frame of {header.nbytes} bytes")
            self._keep(header.nbytes)
        elif header.kind is FrameKind.GOODBYE:
            if header.nbytes:
                raise ProtocolError(f"GOODBYE frame of {header.nbytes} bytes")
        elif header.kind in _SHM_SIZES:
            if header.nbytes > _SHM_SIZES[header.kind]:
                raise ProtocolError(f"{header.kind.name} frame of {header.nbytes} bytes")
            self._keep(header.nbytes)
        elif header.kind is not FrameKind.DATA:
            raise ProtocolError(f"unexpected {header.kind.name} frame after the handshake")
        else:
            tag = (header.group, header.seq, header.step)
            posted = self._mesh.take_posted(self.peer, tag)
            if posted is None:
                self._keep(header.nbytes)
            else:
                out, receive, expected, consume = posted
                if expected != header.fingerprint:
                    receive.set_exception(self._mesh.desync(self.peer, tag, expected,
                                                            header.fingerprint))
                    self._discard()
                elif out.nbytes == header.nbytes:
                    self._target, self._receive = out, receive
                    if consume is not None:
                        self._consume = (consume, 0, out)
                else:
                    receive.set_exception(self._mesh.size_mismatch(self.peer, tag,
                                                                   header.nbytes, out.nbytes))
                    self._discard()
        if not self._remaining:
            self._finish_frame()

    def _finish_frame(self) -> None:
        header = self._frame
        assert header is not None
        if header.kind is FrameKind.HELLO_ACK:
            assert self._kept is not None and self.peer is not None
            token = self._mesh.token
            # The acceptor proves the secret too: a stranger listening on a
            # peer's advertised address learns nothing and gets nothing.
            if token is not None and not _auth.verify(
                    token, "data/acceptor", self._nonce, self._kept.decode(errors="replace"),
                    f"{self._mesh.job}|{self._mesh.rank}"):
                self.ready.set_exception(AuthenticationError(
                    f"rank {self.peer}'s data port did not prove the job's shared secret "
                    "(its ASYNCOLL_TOKEN differs or is missing)"))
            elif not self.ready.done():
                self.ready.set_result(None)
        elif header.kind is FrameKind.CHALLENGE:
            assert self._kept is not None and self.peer is not None
            nonce = self._kept.decode(errors="replace")
            token = self._mesh.token
            response = ("" if token is None else
                        _auth.answer(token, "data", nonce, f"{self._mesh.job}|{self._mesh.rank}"))
            self._nonce = _auth.new_nonce()  # this rank's challenge to the acceptor
            hello = f"{self._mesh.job}\n{response}\n{self._nonce}".encode()
            self.send_frame(FrameKind.HELLO, (0, 0, self._mesh.rank), memoryview(hello))
        elif header.kind is FrameKind.ABORT and not self.ready.done():
            # Refused during the handshake (a wrong secret): the dial fails with it.
            assert self._kept is not None
            code, _, message = decode_abort(bytes(self._kept))
            self.ready.set_exception(error_from_code(code, f"rank {self.peer} refused this "
                                                           f"rank's data connection: {message}"))
        elif header.kind is FrameKind.HELLO:
            assert self._kept is not None
            job, _, rest = bytes(self._kept).partition(b"\n")
            proof, _, their_nonce = rest.decode(errors="replace").partition("\n")
            self.peer = self._mesh.accept_hello(self, header.step, job, self._nonce, proof)
            token = self._mesh.token
            # Bound to the dialer's rank: this rank may not know its own yet (a peer
            # can read the rendezvous reply and dial before this one has).
            ack = ("" if token is None else _auth.answer(
                token, "data/acceptor", their_nonce, f"{self._mesh.job}|{self.peer}"))
            assert self.transport is not None
            self.send_frame(FrameKind.HELLO_ACK, (0, 0, 0), memoryview(ack.encode()))
            self.ready.set_result(None)
        elif header.kind is FrameKind.ABORT:
            assert self._kept is not None and self.peer is not None
            self._mesh.abort_received(self.peer, header.group, header.seq,
                                      *decode_abort(bytes(self._kept)))
        elif header.kind is FrameKind.GOODBYE:
            assert self.peer is not None
            self._mesh.goodbye_received(self.peer)
        elif header.kind in _SHM_SIZES:
            assert self._kept is not None
            self._shm_frame(header, bytes(self._kept))
        elif self._receive is not None:
            if not self._receive.done() and (
                    self._consume is None or consume_into(*self._consume, self._receive)):
                self._receive.set_result(None)
        elif self._kept is not None and self.peer is not None:
            self._mesh.keep_unexpected(self.peer, (header.group, header.seq, header.step),
                                       self._kept, header.fingerprint)
        self._reset()

    def _shm_frame(self, header: FrameHeader, payload: bytes) -> None:
        if header.kind is FrameKind.SHM_DATA:
            self.shm.on_data(header, payload)
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
        self._consume = None
        self._kept = None
        self._target = _NOWHERE
        self._remaining = 0

    def _abort(self, exc: AsyncollError) -> None:
        self._mesh.protocol_failed(self, exc)
        if self.transport is None:
            return
        if isinstance(exc, AuthenticationError) and not self.transport.is_closing():
            # Say why before closing, so the dialer reports a wrong secret, not a loss.
            self.send_frame(FrameKind.ABORT, (0, 0, 0), memoryview(
                encode_abort("authentication", str(exc))))
            self.transport.close()
            return
        self.transport.abort()

    def fail_sends(self) -> None:
        """Fail the sends waiting for the transport to take their bytes (the peer is gone).

        A peer cut off without a reset never acknowledges them, so without
        this they would wait for the operation's deadline.
        """
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(self._mesh.error_for(self.peer))
