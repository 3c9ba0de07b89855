"""The mesh of a process's data-plane connections, one per peer it talks to.

Connections are made lazily, the first time an algorithm sends to or
receives from a peer, and always by the lower rank of the pair: every
algorithm touches a pair from both sides, so the higher rank simply waits
for the lower one to dial. Receives and frames are matched per peer by tag;
a frame that arrives before its receive is posted is kept until it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field

from asyncoll import _auth
from asyncoll._compat import timeout as timeout_after
from asyncoll._settings import HANDSHAKE_TIMEOUT_S, LINGER_S
from asyncoll._transport.base import Consumer, Tag, consume_into
from asyncoll._transport.connection import PeerConnection
from asyncoll._transport.settings import TransportSettings
from asyncoll._wire.frames import NO_FINGERPRINT, Fingerprint, FrameKind, encode_abort
from asyncoll.errors import (
    AsyncollError,
    AuthenticationError,
    ClosedError,
    MismatchError,
    PeerLostError,
    ProtocolError,
    error_code,
    error_from_code,
)

log = logging.getLogger("asyncoll.transport")


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


#: A posted receive: where the payload goes, its future, the fingerprint
#: expected, and what consumes the payload (None: it stays in the destination).
Posted = tuple[memoryview, asyncio.Future[None], Fingerprint, Consumer | None]


@dataclass(slots=True)
class _Channel:
    """Everything this process knows about one peer."""

    address: tuple[str, int] | None = None
    hostname: str = "?"
    connection: PeerConnection | None = None
    dialing: asyncio.Task[None] | None = None
    posted: dict[Tag, Posted] = field(default_factory=dict)
    unexpected: dict[Tag, tuple[bytearray, Fingerprint]] = field(default_factory=dict)
    error: AsyncollError | None = None
    #: The peer sent GOODBYE: its connection closing is a departure, not a loss.
    leaving: bool = False
    #: The peer runs on this host: large payloads may go through shared memory.
    same_host: bool = False
    #: Set once the connection is usable, or once the channel has failed.
    settled: asyncio.Event = field(default_factory=asyncio.Event)


class TcpMesh:
    """Data-plane connections to the other ranks of one job, over TCP.

    Implements the :class:`asyncoll._transport.base.Mesh` seam.
    """

    def __init__(self, job: str, settings: TransportSettings = TransportSettings()) -> None:
        self.loop = asyncio.get_running_loop()
        self.job = job
        self.settings = settings
        #: The job's shared secret: accepted connections must prove it.
        self.token = settings.token
        self._rank = -1
        self._size = 0
        self._channels: dict[int, _Channel] = {}
        self._server: asyncio.Server | None = None
        self._accepted: set[PeerConnection] = set()
        self._broken_groups: dict[int, AsyncollError] = {}
        # Members of every group this rank knows, and the last operation each completed.
        self._groups: dict[int, tuple[int, ...]] = {}
        self._running: dict[int, tuple[int, Fingerprint]] = {}
        self._completed: dict[int, int] = {}
        self._unexpected_count = 0
        self._closed = False
        #: Payloads this large go through shared memory to same-host peers (0: never).
        self._shm_min = settings.shm_min_bytes

    @property
    def rank(self) -> int:
        """This process's global rank (-1 before :meth:`set_directory`)."""
        return self._rank

    @property
    def size(self) -> int:
        """The number of ranks in the job."""
        return self._size

    @property
    def port(self) -> int:
        """The bound data port (0 before :meth:`listen`)."""
        return int(self._server.sockets[0].getsockname()[1]) if self._server else 0

    def peer_address(self, peer: int) -> tuple[str, int] | None:
        """The (host, port) rank ``peer`` advertised, once the directory is known."""
        channel = self._channels.get(peer)
        return channel.address if channel is not None else None

    async def listen(self, host: str, ports: Iterable[int] = (0,)) -> int:
        """Start accepting peers on ``host`` at the first of ``ports`` free; return the port.

        Raises:
            OSError: no port of ``ports`` could be bound (the last error).
        """
        error: OSError | None = None
        for port in ports:
            try:
                self._server = await self.loop.create_server(self._accept, host, port)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                error = exc
                continue
            return int(self._server.sockets[0].getsockname()[1])
        raise error or OSError(errno.EADDRINUSE, "no port to bind")

    def set_directory(self, rank: int, peers: dict[int, tuple[str, int, str]]) -> None:
        """Record this process's rank and every peer's (host, port, hostname)."""
        self._rank = rank
        self._size = len(peers)
        own_hostname = peers[rank][2] if rank in peers else None
        for peer, (host, port, hostname) in peers.items():
            channel = self._channel(peer)
            channel.address = (host, port)
            channel.hostname = hostname
            channel.same_host = hostname == own_hostname and peer != rank
        for peer, channel in self._channels.items():
            if (peer >= rank or peer not in peers) and channel.connection is not None:
                self._fail_channel(peer, ProtocolError(
                    f"rank {peer} dialed rank {rank}, but only lower ranks dial"))
                if channel.connection.transport is not None:
                    channel.connection.transport.abort()

    # -- the seam ---------------------------------------------------------------

    def send(self, peer: int, tag: Tag, payload: memoryview,
             fingerprint: Fingerprint = NO_FINGERPRINT) -> Awaitable[None]:
        """Send ``payload`` to ``peer`` as frame ``tag``; done when it may be reused."""
        if self._broken_groups and tag[0] in self._broken_groups:
            return self._failed_future(self._broken_groups[tag[0]])
        channel = self._connected_channel(peer)
        if channel.error is not None:
            return self.failed(peer)
        connection = channel.connection
        if connection is not None and connection.ready.done():
            if self._shm_min and channel.same_host and payload.nbytes >= self._shm_min:
                sending = self.loop.create_task(connection.shm.send(tag, payload, fingerprint))
                sending.add_done_callback(_retrieve)
                return sending
            return connection.send_frame(FrameKind.DATA, tag, payload, fingerprint)
        sending = self.loop.create_task(self._send_when_ready(peer, tag, payload, fingerprint))
        sending.add_done_callback(_retrieve)
        return sending

    def recv_into(self, peer: int, tag: Tag, out: memoryview,
                  fingerprint: Fingerprint = NO_FINGERPRINT, consume: Consumer | None = None
                  ) -> Awaitable[None]:
        """Receive frame ``tag`` from ``peer`` into ``out`` (or to ``consume``)."""
        if self._broken_groups and tag[0] in self._broken_groups:
            return self._failed_future(self._broken_groups[tag[0]])
        channel = self._connected_channel(peer)
        kept = channel.unexpected.pop(tag, None)
        if kept is not None:
            self._unexpected_count -= 1
            payload, theirs = kept
            if theirs != fingerprint:
                return self._failed_future(self.desync(peer, tag, fingerprint, theirs))
            if len(payload) != out.nbytes:
                return self._failed_future(self.size_mismatch(peer, tag, len(payload),
                                                               out.nbytes))
            received: asyncio.Future[None] = self.loop.create_future()
            if consume is None:
                out[:] = payload
            elif not consume_into(consume, 0, memoryview(payload), received):
                return received
            received.set_result(None)
            return received
        if channel.error is not None:
            return self.failed(peer)
        receive: asyncio.Future[None] = self.loop.create_future()
        channel.posted[tag] = (out, receive, fingerprint, consume)
        receive.add_done_callback(lambda f: self._forget_posted(peer, tag, f))
        return receive

    # -- groups: membership, completion, failure ------------------------------------

    def register_group(self, group_id: int, ranks: Sequence[int]) -> None:
        """Record a group's members, so a lost peer breaks every group it belongs to."""
        self._groups[group_id] = tuple(ranks)

    def begin(self, group_id: int, seq: int, fingerprint: Fingerprint) -> None:
        """Operation ``seq`` of ``group_id`` starts here: frames for it must match it."""
        self._running[group_id] = (seq, fingerprint)
        if not self._unexpected_count:
            return
        for peer, channel in self._channels.items():
            for tag, (_, theirs) in list(channel.unexpected.items()):
                if tag[0] == group_id and tag[1] == seq and theirs != fingerprint:
                    self.abort_group(group_id, seq, self.desync(peer, tag, fingerprint, theirs))
                    return

    def complete(self, group_id: int, seq: int) -> None:
        """Operation ``seq`` of ``group_id`` finished here.

        A frame kept for it (or for an earlier one) was sent by a rank that ran
        a different operation: the group is out of step and is broken.
        """
        self._completed[group_id] = seq
        self._running.pop(group_id, None)
        if not self._unexpected_count:
            return
        for peer, channel in self._channels.items():
            for tag, (_, theirs) in list(channel.unexpected.items()):
                if tag[0] == group_id and tag[1] <= seq:
                    self._stale(peer, tag, theirs)

    def peer_lost(self, peer: int, error: AsyncollError) -> None:
        """``peer`` is gone: fail its channel and break every group that contains it.

        The other members hear it from this rank too (ABORT frames), before
        anything else this rank may send them, such as its goodbye.
        """
        self._fail_channel(peer, error)
        for group_id, members in list(self._groups.items()):
            if peer in members and self._break_group(group_id, error):
                self._send_aborts(group_id, self._completed.get(group_id, 0) + 1, error,
                                  members)

    def peer_left(self, peer: int, hostname: str) -> None:
        """``peer`` left the job (the coordinator says so).

        With a connection to it, its GOODBYE frame says the same after its last
        data; without one, nothing more can come from it.
        """
        channel = self._channel(peer)
        if channel.connection is None:
            self._fail_channel(peer, self._left_error(peer, hostname))

    def _left_error(self, peer: int, hostname: str) -> MismatchError:
        return MismatchError(f"rank {peer} on {hostname} left the job (destroy_process_group) "
                             "while this rank still expected data from it: the ranks called "
                             "different numbers of collectives")


    def group_error(self, group_id: int) -> AsyncollError | None:
        """The failure that broke group ``group_id``, or None while it is intact."""
        return self._broken_groups.get(group_id)

    def abort_group(self, group_id: int, seq: int, error: AsyncollError,
                    members: Sequence[int] | None = None) -> None:
        """Break group ``group_id`` here, and tell its other members to do the same.

        Every receive of the group waiting here fails with ``error``, as do all
        later sends and receives. The ABORT frames are what keeps a ring from
        hanging: a rank whose neighbour failed would otherwise wait for data
        that will never come.
        """
        if not self._break_group(group_id, error):
            return
        self._send_aborts(group_id, seq, error, members)

    def _send_aborts(self, group_id: int, seq: int, error: AsyncollError,
                     members: Sequence[int] | None, skip: int = -1) -> None:
        lost = error.rank if isinstance(error, PeerLostError) else -1
        payload = memoryview(encode_abort(error_code(type(error)), str(error), lost))
        for peer in members if members is not None else self._groups.get(group_id, ()):
            if peer == skip:
                continue
            channel = self._channels.get(peer)
            connection = channel.connection if channel is not None else None
            if (peer != self._rank and connection is not None and connection.ready.done()
                    and connection.transport is not None
                    and not connection.transport.is_closing()):
                sent = connection.send_frame(FrameKind.ABORT, (group_id, seq, 0), payload)
                # Best effort: nobody waits for it, and its failure must not be logged
                # as an unretrieved exception.
                asyncio.ensure_future(sent).add_done_callback(_retrieve)

    def abort_received(self, peer: int, group_id: int, seq: int, code: str, lost: int,
                       message: str) -> None:
        """Rank ``peer`` gave up on operation ``seq`` of a group: break it here too.

        The ABORT is passed on to the members connected to this rank, so it
        reaches every member that some operation connected, not just the
        neighbours of the rank that failed first.
        """
        prefix = f"rank {peer} abandoned operation #{seq} of group {group_id}: "
        error = error_from_code(code, message if message.startswith("rank ") and
                                "abandoned operation" in message else prefix + message)
        if isinstance(error, PeerLostError):
            error.rank = lost if lost >= 0 else peer
            named = self._channels.get(error.rank)
            error.host = named.hostname if named is not None else ""
        if self._break_group(group_id, error):
            self._send_aborts(group_id, seq, error, None, skip=peer)

    def _break_group(self, group_id: int, error: AsyncollError) -> bool:
        if group_id in self._broken_groups:
            return False
        self._broken_groups[group_id] = error
        for channel in self._channels.values():
            for tag, (_, receive, _, _) in list(channel.posted.items()):
                if tag[0] == group_id and not receive.done():
                    receive.set_exception(error)
            if channel.connection is not None:
                channel.connection.fail_receive(error, group_id)
            for tag in [t for t in channel.unexpected if t[0] == group_id]:
                del channel.unexpected[tag]  # never wanted now
                self._unexpected_count -= 1
        return True

    # -- called by connections --------------------------------------------------

    def take_posted(self, peer: int, tag: Tag) -> Posted | None:
        """Remove and return the receive posted for ``tag`` from ``peer``, if any."""
        posted = self._channel(peer).posted.pop(tag, None)
        if posted is not None and posted[1].done():
            return None
        return posted

    def keep_unexpected(self, peer: int, tag: Tag, payload: bytearray,
                        fingerprint: Fingerprint) -> None:
        """Deliver a frame that had no receive posted when its header arrived.

        The receive may have been posted while the payload was arriving: then
        it gets the payload now; otherwise the payload is kept for it.
        """
        posted = self.take_posted(peer, tag)
        if posted is not None:
            out, receive, expected, consume = posted
            if expected != fingerprint:
                receive.set_exception(self.desync(peer, tag, expected, fingerprint))
            elif out.nbytes == len(payload):
                if consume is None:
                    out[:] = payload
                elif not consume_into(consume, 0, memoryview(payload), receive):
                    return
                receive.set_result(None)
            else:
                receive.set_exception(self.size_mismatch(peer, tag, len(payload), out.nbytes))
            return
        if tag[0] in self._broken_groups or self._closed:
            return
        channel = self._channel(peer)
        if tag in channel.unexpected:
            raise ProtocolError(f"rank {peer} sent frame {tag} twice")
        channel.unexpected[tag] = (payload, fingerprint)
        self._unexpected_count += 1
        running = self._running.get(tag[0])
        if running is not None and running[0] == tag[1] and running[1] != fingerprint:
            self.abort_group(tag[0], tag[1], self.desync(peer, tag, running[1], fingerprint))
        elif tag[1] <= self._completed.get(tag[0], 0):
            self._stale(peer, tag, fingerprint)

    def _stale(self, peer: int, tag: Tag, theirs: Fingerprint) -> None:
        """Rank ``peer`` sent data for an operation this rank finished without it."""
        described = ", ".join(f"{k} {v}" for k, v in theirs.fields().items())
        self.abort_group(tag[0], tag[1], MismatchError(
            f"rank {peer} sent data for operation #{tag[1]} of group {tag[0]} ({described}), "
            "which this rank completed without expecting it: the ranks called different "
            "collectives, or passed different roots"))

    def goodbye_received(self, peer: int) -> None:
        """``peer`` is leaving the job; whatever it still owes this rank will never come."""
        channel = self._channel(peer)
        channel.leaving = True

    def accept_hello(self, connection: PeerConnection, peer: int, job: bytes, nonce: str,
                     response: str) -> int:
        """Validate an incoming handshake and attach the connection to ``peer``.

        Raises:
            AuthenticationError: the job has a secret and the dialer did not prove it.
            ProtocolError: another job's peer, or a rank that should not dial here.
        """
        if self.token is not None and not _auth.verify(
                self.token, "data", nonce, response, f"{job.decode(errors='replace')}|{peer}"):
            raise AuthenticationError(f"a data connection claiming to be rank {peer} did not "
                                      "prove the job's shared secret (ASYNCOLL_TOKEN differs "
                                      "or is missing); closed")
        if job != self.job.encode():
            raise ProtocolError(f"a peer of job {job.decode(errors='replace')!r} connected to "
                                f"this peer of job {self.job!r}")
        channel = self._channel(peer)
        # Before the directory is known (a peer may read the rendezvous reply
        # and dial before this one does) the rank check waits for set_directory.
        if (0 <= self._rank <= peer) or channel.connection is not None:
            raise ProtocolError(f"unexpected connection from rank {peer} (this is rank "
                                f"{self._rank}; only lower ranks dial, once)")
        channel.connection = connection
        channel.settled.set()
        return peer

    def connection_lost(self, connection: PeerConnection, exc: Exception | None) -> None:
        """A connection closed: fail everything that waits on its peer."""
        self._accepted.discard(connection)
        peer = connection.peer
        if peer is None or self._closed:
            return
        channel = self._channel(peer)
        if channel.connection is not connection:
            return
        if channel.leaving:
            self._fail_channel(peer, self._left_error(peer, channel.hostname))
            return
        how = f"broke: {exc}" if exc else "was closed without a goodbye"
        address = "%s:%d" % channel.address if channel.address else "?"
        error = PeerLostError(f"rank {peer} on host {channel.hostname} ({address}) was lost: "
                              f"its data connection {how}", rank=peer, host=channel.hostname)
        if exc is not None:
            error.__cause__ = exc
        self.peer_lost(peer, error)

    def protocol_failed(self, connection: PeerConnection, exc: AsyncollError) -> None:
        """A connection received something malformed: fail its peer's operations."""
        log.warning("data connection from rank %s failed: %s", connection.peer, exc)
        if connection.peer is not None:
            self._fail_channel(connection.peer, exc)

    def error_for(self, peer: int | None) -> AsyncollError:
        """The error to give operations on ``peer`` once it has failed."""
        channel = self._channels.get(peer) if peer is not None else None
        if channel is not None and channel.error is not None:
            return channel.error
        if peer is None:
            return PeerLostError("a data connection closed before its peer was known")
        host = channel.hostname if channel is not None else "?"
        # Its connection is closing, and why is not known yet (the close is being
        # processed): a peer whose connection ends without a goodbye is lost.
        return PeerLostError(f"rank {peer} on host {host} was lost: its data connection is "
                             "closed", rank=peer, host=host)

    def failed(self, peer: int | None) -> asyncio.Future[None]:
        """An already-failed future carrying ``peer``'s error."""
        return self._failed_future(self.error_for(peer))

    async def close(self) -> None:
        """Close every connection and the listener; pending operations fail."""
        if self._closed:
            return
        error = ClosedError("the process group was destroyed on this rank while this "
                            "operation ran")
        for peer in list(self._channels):
            self._fail_channel(peer, error)
        self._closed = True
        lingering = []
        for channel in self._channels.values():
            if channel.dialing is not None:
                channel.dialing.cancel()
            connection = channel.connection
            transport = connection.transport if connection is not None else None
            if connection is None or transport is None or transport.is_closing():
                continue
            if connection.ready.done() and transport.can_write_eof():
                # GOODBYE after this rank's last frames, so the peer can tell
                # leaving from dying; then half-close and keep reading (and
                # discarding) until the peer closes too. Closing with unread
                # data would send a reset, and a reset can destroy frames not
                # yet read on the other side, such as the ABORTs just sent.
                asyncio.ensure_future(connection.send_frame(
                    FrameKind.GOODBYE, (0, 0, 0), memoryview(b""))).add_done_callback(_retrieve)
                transport.write_eof()
                connection.half_closed = True
                lingering.append(connection.closed)
            else:
                transport.close()
        if lingering:
            await asyncio.wait(lingering, timeout=LINGER_S)
        for connection in [*(c.connection for c in self._channels.values()), *self._accepted]:
            if connection is not None and connection.transport is not None:
                connection.transport.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                async with timeout_after(HANDSHAKE_TIMEOUT_S):
                    await self._server.wait_closed()

    # -- internals ----------------------------------------------------------------

    def _accept(self) -> PeerConnection:
        connection = PeerConnection(self, None)
        self._accepted.add(connection)
        # A connection that never completes its handshake is dropped.
        self.loop.call_later(HANDSHAKE_TIMEOUT_S, self._drop_if_silent, connection)
        return connection

    def _drop_if_silent(self, connection: PeerConnection) -> None:
        if not connection.ready.done() and connection.transport is not None:
            log.warning("dropping a data connection from %s that sent no handshake within "
                        "%s s", connection.transport.get_extra_info("peername"),
                        HANDSHAKE_TIMEOUT_S)
            connection.transport.abort()

    def _channel(self, peer: int) -> _Channel:
        channel = self._channels.get(peer)
        if channel is None:
            channel = self._channels[peer] = _Channel()
        return channel

    def _connected_channel(self, peer: int) -> _Channel:
        channel = self._channel(peer)
        if (channel.connection is None and channel.dialing is None and channel.error is None
                and peer > self._rank and not self._closed):
            channel.dialing = self.loop.create_task(self._dial(peer))
        return channel

    async def _dial(self, peer: int) -> None:
        channel = self._channel(peer)
        if channel.address is None:
            self._fail_channel(peer, PeerLostError(f"rank {peer} is not in this job's "
                                                   "directory", rank=peer))
            return
        host, port = channel.address
        connection: PeerConnection | None = None
        try:
            async with timeout_after(HANDSHAKE_TIMEOUT_S):
                _, connection = await self.loop.create_connection(
                    lambda: PeerConnection(self, peer), host, port)
                channel.connection = connection
                await connection.ready
            channel.settled.set()
        except AsyncollError as exc:  # refused by the peer during the handshake
            log.warning("rank %d refused this rank's data connection: %s", peer, exc)
            self._fail_channel(peer, exc)
            if connection is not None and connection.transport is not None:
                connection.transport.abort()
        except (OSError, TimeoutError) as exc:
            error = PeerLostError(
                f"could not connect to rank {peer} at {host}:{port}, the address it "
                f"advertised from host {channel.hostname}: {str(exc) or 'timed out'}; if that "
                "address is not reachable from here, set ASYNCOLL_ADVERTISE_ADDR or "
                "ASYNCOLL_SOCKET_IFNAME for that rank", rank=peer, host=channel.hostname)
            error.__cause__ = exc
            self._fail_channel(peer, error)
            if connection is not None and connection.transport is not None:
                connection.transport.abort()

    async def _send_when_ready(self, peer: int, tag: Tag, payload: memoryview,
                               fingerprint: Fingerprint) -> None:
        channel = self._channel(peer)
        await channel.settled.wait()
        if channel.error is not None:
            raise channel.error
        assert channel.connection is not None  # settled without error: connected
        if self._shm_min and channel.same_host and payload.nbytes >= self._shm_min:
            await channel.connection.shm.send(tag, payload, fingerprint)
        else:
            await channel.connection.send_frame(FrameKind.DATA, tag, payload, fingerprint)

    def _fail_channel(self, peer: int, error: AsyncollError) -> None:
        channel = self._channel(peer)
        if channel.error is None:
            channel.error = error
        channel.settled.set()
        posted, channel.posted = channel.posted, {}
        for _, receive, _, _ in posted.values():
            if not receive.done():
                receive.set_exception(channel.error)
        if channel.connection is not None:
            channel.connection.fail_receive(channel.error)
            channel.connection.fail_sends()
        connection = channel.connection
        if connection is not None and not connection.ready.done():
            connection.ready.set_exception(channel.error)
            connection.ready.exception()  # mark retrieved: the dialer may be gone

    def _forget_posted(self, peer: int, tag: Tag, receive: asyncio.Future[None]) -> None:
        channel = self._channels.get(peer)
        if channel is not None:
            entry = channel.posted.get(tag)
            if entry is not None and entry[1] is receive:
                del channel.posted[tag]

    def desync(self, peer: int, tag: Tag, mine: Fingerprint,
               theirs: Fingerprint) -> MismatchError:
        """The error for a frame of a different operation than the one this rank runs."""
        return MismatchError(f"ranks {self._rank} and {peer} called operation #{tag[1]} of "
                             f"group {tag[0]} differently ("
                             f"{'; '.join(mine.differences(theirs, self._rank, peer))}): every "
                             "rank must call the same collectives in the same order, with the "
                             "same arguments")

    @staticmethod
    def size_mismatch(peer: int, tag: Tag, sent: int, expected: int) -> MismatchError:
        """The error for a frame whose size differs from its receive's."""
        return MismatchError(f"rank {peer} sent {sent} bytes for step {tag[2]} of operation "
                             f"#{tag[1]} on group {tag[0]}; this rank expected {expected}: "
                             "the ranks called collectives of different sizes")

    def _done_future(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self.loop.create_future()
        future.set_result(None)
        return future

    def _failed_future(self, error: AsyncollError) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self.loop.create_future()
        future.set_exception(error)
        return future
