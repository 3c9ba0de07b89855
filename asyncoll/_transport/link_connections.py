"""Connections: one member's TCP connections to the others of a group, opened as needed.

The socket side of DirectLinks (asyncoll._transport.links): which member
each connection is to, opening it the first time an algorithm needs it (by
the lower member of the pair, as the mesh does), accepting those opened by
others once their greeting carries this member's cookie, moving queued
bytes out, and noticing a connection's end. The records carried over them
are DirectLinks' business (asyncoll._transport.link_reader reads them).
"""

from __future__ import annotations

import select
import socket
import ssl
from collections import deque

from asyncoll._tls import handshake as tls_handshake
from asyncoll._transport.link_errors import LinkLost
from asyncoll._transport.link_opening import (
    GREETING,
    Dialling,
    accept_secure,
    open_secure,
    start_dial,
)
from asyncoll._transport.base import EarlyCount
from asyncoll._transport.matcher import Matcher

#: Each connection's read buffer: small records arrive whole in one recv.
READ_BYTES = 64 << 10
#: What a non-blocking send or recv raises when it would block (TLS: its own two).
WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
#: TLS has no scatter-gather send: buffers up to this many bytes in all are joined into one.
_JOIN_BYTES = 64 << 10


def transmit(sock: socket.socket, buffers: list[memoryview]) -> int:
    """Send what ``sock`` takes now of ``buffers``, in order; return how many bytes.

    Raises what a non-blocking send raises (see :data:`WOULD_BLOCK`).
    """
    if not isinstance(sock, ssl.SSLSocket):
        return sock.sendmsg(buffers)
    # A TLS send that would block must be retried with the same bytes at the
    # front, as many or more: the queue only grows at its end, and joins stop
    # at the same buffer, so the next try starts with this one's bytes.
    first = buffers[0]
    if first.nbytes >= _JOIN_BYTES or len(buffers) == 1:
        return sock.send(first)
    joined, total = [], 0
    for buffer in buffers:
        if total + buffer.nbytes > _JOIN_BYTES:
            break
        joined.append(buffer)
        total += buffer.nbytes
    return sock.send(b"".join(joined))


def pending(sock: socket.socket) -> bool:
    """Whether ``sock`` holds bytes already read from the network (TLS: a record's rest),
    which poll() does not report."""
    return isinstance(sock, ssl.SSLSocket) and sock.pending() > 0


class Peer(Matcher[memoryview, tuple[int, ...]]):
    """One connection: what is queued to send, the record being read, and (as a
    Matcher) the receives posted for the member's records and those kept early.

    ``sock`` is None while the connection is yet to come from the lower
    member (what is sent waits in ``out``); ``index`` is -1 for a connection
    accepted whose greeting has not come yet.
    """

    def __init__(self, index: int, sock: socket.socket | None, count: EarlyCount) -> None:
        super().__init__(f"member {index}", count)
        self.index = index
        self.sock = sock
        self.out: deque[memoryview] = deque()
        #: Bytes read and not yet cut into records: buffer[start:end].
        self.buffer = bytearray(READ_BYTES)
        self.view = memoryview(self.buffer)
        self.start = 0
        self.end = 0
        #: Where the payload being read goes, and how much of it is in.
        self.target: memoryview | None = None
        self.target_got = 0
        #: The tag of the record being read.
        self.key: tuple[int, int, int] = (0, 0, 0)
        self.fingerprint: tuple[int, ...] = ()
        #: The operation of an ABORT record being read.
        self.aborted: int | None = None
        #: Why the connection ended, once it has.
        self.closed: str | None = None


class Connections:
    """A member's connections to the others of one group, by member index.

    Args:
        sockets: connected sockets, by member index, to begin with.
        dialling: how to open the links to other members when first needed,
            and accept theirs; without it, ``sockets`` are all there is.
    """

    def __init__(self, sockets: dict[int, socket.socket],
                 dialling: Dialling | None = None) -> None:
        self._peers: dict[int, Peer] = {}
        #: Records kept early by every peer's matcher.
        self._early = EarlyCount()
        self._by_fd: dict[int, Peer] = {}
        self._poll = select.poll()
        self._writing: set[int] = set()
        #: Members whose records wait for the connection the lower member opens.
        self._queued: set[int] = set()
        self._dialling = dialling
        self._server_fd = -1
        if dialling is not None:
            dialling.server.setblocking(False)
            self._server_fd = dialling.server.fileno()
            self._poll.register(self._server_fd, select.POLLIN)
        for index, sock in sockets.items():
            self._attach(index, sock)
        #: Whether some connection has ended (see ended).
        self._gone = False

    def close(self) -> None:
        """Close every connection, and the listening socket."""
        for peer in self._by_fd.values():
            assert peer.sock is not None
            peer.sock.close()
        if self._dialling is not None:
            self._dialling.server.close()
        self._peers.clear()
        self._by_fd.clear()

    @property
    def connected(self) -> int:
        """How many members this one has a connection with."""
        return sum(1 for peer in self._peers.values() if peer.sock is not None)

    def _attach(self, index: int, sock: socket.socket) -> Peer:
        """Use ``sock`` for member ``index`` (sending what waited for it)."""
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = self._peers.get(index)
        if peer is None:
            peer = self._peers[index] = Peer(index, sock, self._early)
        peer.sock = sock
        fd = sock.fileno()
        self._by_fd[fd] = peer
        self._poll.register(fd, select.POLLIN)
        if peer.out:
            self._queued.discard(index)
            self._want_write(peer)
        return peer

    def _open(self, index: int) -> Peer:
        """Member ``index``'s connection, first needed now: dialled if this member is the
        lower of the two, else a place for records until the other's arrives."""
        dialling = self._dialling
        if dialling is None or not 0 <= index < len(dialling.addresses) or index == dialling.me:
            raise LinkLost(index, "does not exist (no such member, or no way to open it)")
        if index < dialling.me:
            peer = self._peers[index] = Peer(index, None, self._early)
            return peer
        host, port, cookie = dialling.addresses[index]
        try:
            if dialling.tls is None:
                sock, greeting = start_dial(host, port, cookie, dialling.me)
            else:
                sock, greeting = open_secure(dialling.tls, host, port), GREETING.pack(
                    cookie, dialling.me)
        except ssl.SSLError as exc:
            raise LinkLost(index, "could not be opened: " + str(tls_handshake.refusal(
                exc, f"member {index} at {host}:{port}", mutual=dialling.tls is not None
                and dialling.tls.mutual))) from None
        except OSError as exc:
            raise LinkLost(index, f"could not be opened: {exc}") from None
        peer = self._attach(index, sock)
        peer.out.append(memoryview(greeting))
        self._want_write(peer)
        return peer

    def _accept(self) -> None:
        """Take the connections waiting on the listening socket (their greeting comes later)."""
        assert self._dialling is not None
        while True:
            try:
                sock, _ = self._dialling.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # a connection reset before it was taken: nothing to take
            if self._dialling.tls is not None:
                secure = accept_secure(self._dialling.tls, sock)
                if secure is None:
                    continue
                sock = secure
            sock.setblocking(False)
            fd = sock.fileno()
            self._by_fd[fd] = Peer(-1, sock, self._early)
            self._poll.register(fd, select.POLLIN)

    def identify(self, stranger: Peer) -> Peer | None:
        """Read an accepted connection's greeting: the member it is from, or None (not yet,
        or it was no member's, and is closed)."""
        sock = stranger.sock
        assert sock is not None and self._dialling is not None
        try:
            got = sock.recv_into(stranger.view[stranger.end:GREETING.size])
        except WOULD_BLOCK:
            return None
        except OSError:
            got = 0
        stranger.end += got
        if got and stranger.end < GREETING.size:
            return None
        cookie, index = GREETING.unpack_from(stranger.buffer) if got else (None, -1)
        known = self._peers.get(index)
        if cookie != self._dialling.cookie or not 0 <= index < self._dialling.me or (
                known is not None and known.sock is not None):
            # Not a member's greeting (or a second connection): drop it.
            fd = sock.fileno()
            del self._by_fd[fd]
            self._poll.unregister(fd)
            sock.close()
            return None
        del self._by_fd[sock.fileno()]
        return self._attach(index, sock)

    def ended(self, peer: Peer, reason: str) -> None:
        """``peer``'s connection ended: only a wait for that peer fails of it.

        A member that finished the group's last operation may close before the
        others have, and they must still finish theirs with the rest.
        """
        if peer.closed is None:
            peer.closed = reason
            self._gone = True
            assert peer.sock is not None
            fd = peer.sock.fileno()
            self._writing.discard(fd)
            self._poll.unregister(fd)

    def _want_write(self, peer: Peer) -> None:
        assert peer.sock is not None
        fd = peer.sock.fileno()
        if fd not in self._writing:
            self._writing.add(fd)
            self._poll.modify(fd, select.POLLIN | select.POLLOUT)

    def _write_some(self) -> None:
        for fd in list(self._writing):
            peer = self._by_fd[fd]
            sock = peer.sock
            assert sock is not None
            while peer.out:
                try:
                    sent = transmit(sock, list(peer.out)[:64])
                except WOULD_BLOCK:
                    break
                except OSError as exc:
                    raise LinkLost(peer.index, f"failed: {exc}") from None
                while peer.out and (sent or not peer.out[0].nbytes):
                    head = peer.out[0]
                    if sent >= head.nbytes:
                        sent -= head.nbytes
                        peer.out.popleft()
                    else:
                        peer.out[0] = head[sent:]
                        sent = 0
            if not peer.out:
                self._writing.discard(fd)
                self._poll.modify(fd, select.POLLIN)
