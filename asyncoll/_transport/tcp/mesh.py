"""TcpMesh: a process's data-plane connections, one per peer it talks to.

Connections are made lazily, the first time an algorithm sends to or
receives from a peer, and always by the lower rank of the pair: every
algorithm touches a pair from both sides, so the higher rank simply waits
for the lower one to dial. Each peer's frames meet their receives in its
:class:`~asyncoll._transport.inbox.Inbox`; large payloads to same-host
peers go through shared memory (shm/link.py).

The mesh knows peers and tags, never what a tag's channel stands for: a
failure is fanned out by one ``fail`` per peer (every receive and send with
it, or those of one channel), and what a lost peer or an ABORT frame breaks,
and how a frame that does not fit its receive is worded, is decided by the
:class:`~asyncoll._transport.base.Listener` above.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import ssl
from collections.abc import Awaitable, Iterable

from asyncoll._compat import close_server, timeout as timeout_after
from asyncoll._defaults import HANDSHAKE_TIMEOUT_S, LINGER_S
from asyncoll._tls import handshake as tls_handshake
from asyncoll._transport.base import Consumer, Listener, Tag
from asyncoll._transport.tcp import handshake
from asyncoll._transport.tcp.connection import PeerConnection
from asyncoll._transport.tcp.keepalive import Keepalive
from asyncoll._transport.tcp.peer_state import PeerState, Resolve
from asyncoll._transport.inbox import EarlyCount, Inbox
from asyncoll._transport.settings import TransportSettings
from asyncoll._wire.endpoint import join_host_port
from asyncoll._wire.frames import NO_FINGERPRINT, Fingerprint, FrameKind
from asyncoll.errors import AsyncollError, ClosedError, PeerLostError, ProtocolError

log = logging.getLogger("asyncoll.transport")


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _failed(loop: asyncio.AbstractEventLoop, error: AsyncollError) -> asyncio.Future[None]:
    future: asyncio.Future[None] = loop.create_future()
    future.set_exception(error)
    return future


class TcpMesh:
    """Data-plane connections to the other ranks of one job, over TCP.

    Implements the :class:`asyncoll._transport.base.Mesh` seam.
    """

    def __init__(self, job: str, settings: TransportSettings = TransportSettings()) -> None:
        self.loop = asyncio.get_running_loop()
        self.job = job
        self.settings = settings
        #: Told about early frames, ABORT frames and lost peers; words mismatches (the
        #: layer above).
        self.listener: Listener | None = None
        self._rank = -1
        self._size = 0
        self._peers: dict[int, PeerState] = {}
        self._server: asyncio.Server | tls_handshake.TlsServer | None = None
        self._accepted: set[PeerConnection] = set()
        #: Channels failed here: their sends and receives fail at once.
        self._failed_channels: dict[int, AsyncollError] = {}
        self._early_count = EarlyCount()
        self._closed = False
        self._resolve: Resolve | None = None
        #: Which awaited peers answer (probe); told of waits in other threads (awaiting).
        self.keepalive = Keepalive()

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
        """The (host, port) rank ``peer`` advertised, once the directory is known (port 0:
        the directory left it out, and it is learnt when first dialled)."""
        state = self._peers.get(peer)
        return state.address if state is not None else None

    def hostname(self, peer: int) -> str:
        """The host name rank ``peer`` reported ("" when unknown)."""
        state = self._peers.get(peer)
        return state.hostname if state is not None and state.hostname != "?" else ""

    async def listen(self, host: str, ports: Iterable[int] = (0,)) -> int:
        """Start accepting peers on ``host`` at the first of ``ports`` free; return the port.

        Raises:
            OSError: no port of ``ports`` could be bound (the last error).
        """
        error: OSError | None = None
        for port in ports:
            try:
                self._server = await self._start_server(host, port)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                error = exc
                continue
            return int(self._server.sockets[0].getsockname()[1])
        raise error or OSError(errno.EADDRINUSE, "no port to bind")

    async def _start_server(self, host: str, port: int
                            ) -> asyncio.Server | tls_handshake.TlsServer:
        tls = self.settings.tls
        if tls is None:
            return await self.loop.create_server(self._accept, host, port)
        server = tls_handshake.TlsServer(tls, self._accept, handshake.requires_tls(),
                                         "this rank's data port")
        await server.start(host, port)
        return server

    def set_directory(self, rank: int, peers: dict[int, tuple[str, int, str]],
                      resolve: Resolve | None = None) -> None:
        """Record this process's rank and every peer's (host, port, hostname); a port
        of 0 is asked of ``resolve`` when the peer is first dialled."""
        self._rank = rank
        self._resolve = resolve
        self._size = len(peers)
        own_hostname = peers[rank][2] if rank in peers else None
        for peer, (host, port, hostname) in peers.items():
            state = self._peer(peer)
            state.address = (host, port)
            state.hostname = hostname
            state.same_host = hostname == own_hostname and peer != rank
        for peer, state in self._peers.items():
            if (peer >= rank or peer not in peers) and state.connection is not None:
                state.fail(ProtocolError(
                    f"rank {peer} dialed rank {rank}, but only lower ranks dial"))
                if state.connection.transport is not None:
                    state.connection.transport.abort()

    # -- the seam ---------------------------------------------------------------

    def send(self, peer: int, tag: Tag, payload: memoryview,
             fingerprint: Fingerprint = NO_FINGERPRINT) -> Awaitable[None]:
        """Send ``payload`` to ``peer`` as frame ``tag``; done when it may be reused."""
        if self._failed_channels and tag[0] in self._failed_channels:
            return _failed(self.loop, self._failed_channels[tag[0]])
        state = self._connected_peer(peer)
        if state.error is not None:
            return _failed(self.loop, state.error)
        connection = state.connection
        if connection is not None and connection.ready.done():
            if self._through_shm(state, payload):
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
        if self._failed_channels and tag[0] in self._failed_channels:
            return _failed(self.loop, self._failed_channels[tag[0]])
        return self._connected_peer(peer).inbox.post(tag, out, fingerprint, consume)

    def watch(self, peer: int, tag: Tag) -> asyncio.Future[int]:
        """A future for frame ``tag`` from ``peer`` having arrived, taking nothing."""
        if self._failed_channels and tag[0] in self._failed_channels:
            future: asyncio.Future[int] = self.loop.create_future()
            future.set_exception(self._failed_channels[tag[0]])
            return future
        return self._connected_peer(peer).inbox.watch(tag)

    # -- for the layer above: control frames, early frames, failures ---------------

    def send_control(self, peer: int, tag: Tag, payload: memoryview) -> None:
        """Send an ABORT frame about ``tag`` to ``peer``; best effort: a connection coming
        up carries it once ready (within HANDSHAKE_TIMEOUT_S), none is dialed for it."""
        if peer == self._rank or self._closed or self._peer(peer).error is not None:
            return
        state = self._peers[peer]
        sent = (state.send_control(tag, payload) if state.settled.is_set() else
                state.send_control_when_ready(tag, bytes(payload), HANDSHAKE_TIMEOUT_S))
        if sent is not None:  # nobody waits for it: its failure is not logged as unretrieved
            asyncio.ensure_future(sent).add_done_callback(_retrieve)

    def early(self, channel: int) -> list[tuple[int, Tag, Fingerprint]]:
        """(peer, tag, fingerprint) of every frame of channel ``channel`` kept early."""
        return [(peer, tag, fp) for peer, state in self._peers.items()
                if state.inbox.has_early for tag, fp in state.inbox.early(channel)]

    @property
    def has_early(self) -> bool:
        """Whether any peer's inbox keeps an early frame."""
        return self._early_count.frames > 0

    @property
    def early_count(self) -> EarlyCount:
        """The count behind :attr:`has_early`, which the compiled entry reads
        (asyncoll._group.express)."""
        return self._early_count

    def fail_channel(self, channel: int, error: AsyncollError) -> None:
        """Fail every send and receive of channel ``channel``, pending and later (sticky)."""
        if channel in self._failed_channels:
            return
        self._failed_channels[channel] = error
        for state in self._peers.values():
            state.fail(error, channel)

    def fail_peer(self, peer: int, error: AsyncollError) -> None:
        """Fail every send and receive with ``peer``, pending and later (sticky)."""
        self._peer(peer).fail(error)

    def awaiting(self, peer: int) -> None:
        """A wait in another thread (a fast path's) waits for ``peer`` now; any thread."""
        self.keepalive.note(peer)

    def peer_left(self, peer: int, hostname: str) -> None:
        """``peer`` left the job (the coordinator says so).

        With a connection to it, its GOODBYE frame says the same after its last
        data; without one, nothing more can come from it.
        """
        state = self._peer(peer)
        if state.connection is None:
            state.fail(state.inbox.departed(hostname))

    # -- the connections' owner (ConnectionOwner) -----------------------------------

    def inbox(self, peer: int) -> Inbox:
        """The inbox of ``peer``'s frames."""
        return self._peer(peer).inbox

    def accept_hello(self, connection: PeerConnection, peer: int) -> None:
        """Attach an accepted connection, whose HELLO proved the job, to ``peer``.

        Raises:
            ProtocolError: a rank that should not dial here, or a second connection.
        """
        state = self._peer(peer)
        # Before the directory is known (a peer may read the rendezvous reply
        # and dial before this one does) the rank check waits for set_directory.
        if (0 <= self._rank <= peer) or state.connection is not None:
            raise ProtocolError(f"unexpected connection from rank {peer} (this is rank "
                                f"{self._rank}; only lower ranks dial, once)")
        self._attach(state, connection)
        state.settled.set()

    def control_received(self, peer: int, tag: Tag, payload: bytes) -> None:
        """``peer`` sent an ABORT frame: the listener decides what it breaks."""
        if self.listener is not None and not self._closed:
            self.listener.control_received(peer, tag, payload)

    def goodbye_received(self, peer: int) -> None:
        """``peer`` is leaving the job; whatever it still owes this rank will never come."""
        self._peer(peer).leaving = True

    def connection_lost(self, connection: PeerConnection, exc: Exception | None) -> None:
        """A connection closed: fail everything that waits on its peer."""
        self._accepted.discard(connection)
        peer = connection.peer
        if peer is None or self._closed:
            return
        state = self._peer(peer)
        if state.connection is not connection:
            return
        if state.leaving:
            state.fail(state.inbox.departed(state.hostname))
            return
        if self.settings.tls is not None and not connection.ready.done():
            # The dialer's TLS handshake passed, and the acceptor refused it after.
            address = join_host_port(*state.address) if state.address else "?"
            other = f"rank {peer}'s data port at {address}"
            state.fail(tls_handshake.refusal(exc, other, mutual=self.settings.tls.mutual)
                       if isinstance(exc, ssl.SSLError)
                       else tls_handshake.closed_after_handshake(other))
            return
        how = f"broke: {exc}" if exc else "was closed without a goodbye"
        self._lose(peer, f"its data connection {how}", exc)

    def probe(self, deadline: float, fresh: float) -> None:
        """Probe the peers this rank waits for (see keepalive.py): one silent for
        ``deadline`` seconds is lost; a note counts ``fresh`` seconds."""
        for peer in self.keepalive.tick(self._peers, deadline, fresh):
            self._lose(peer, f"nothing came over its data connection for {deadline:g} s of "
                             "keepalives (frozen or cut off), and no coordinator judged it")

    def _lose(self, peer: int, why: str, exc: Exception | None = None) -> None:
        state = self._peer(peer)
        address = "{}:{}".format(*state.address) if state.address else "?"
        error = PeerLostError(f"rank {peer} on host {state.hostname} ({address}) was lost: {why}",
                              rank=peer, host=state.hostname)
        if exc is not None:
            error.__cause__ = exc
        state.fail(error)
        if self.listener is not None:
            self.listener.peer_lost(peer, error)

    def protocol_failed(self, connection: PeerConnection, exc: AsyncollError) -> None:
        """A connection received something malformed: fail its peer's operations."""
        log.warning("data connection from rank %s failed: %s", connection.peer, exc)
        if connection.peer is not None:
            self._peer(connection.peer).fail(exc)

    def error_for(self, peer: int | None) -> AsyncollError:
        """The error to give operations on ``peer`` once it has failed."""
        state = self._peers.get(peer) if peer is not None else None
        if state is not None and state.error is not None:
            return state.error
        if peer is None:
            return PeerLostError("a data connection closed before its peer was known")
        host = state.hostname if state is not None else "?"
        # Its connection is closing, and why is not known yet (the close is being
        # processed): a peer whose connection ends without a goodbye is lost.
        return PeerLostError(f"rank {peer} on host {host} was lost: its data connection is "
                             "closed", rank=peer, host=host)

    async def close(self, goodbye: bool = True) -> None:
        """Close every connection and the listener; pending operations fail (no goodbye: lost)."""
        if self._closed:
            return
        error = ClosedError("the process group was destroyed on this rank while this "
                            "operation ran")
        # A peer declared lost may only be frozen: waiting for it to close its
        # end would only delay the survivors (an elastic job's reconfigure).
        lost = {id(p) for p in self._peers.values() if isinstance(p.inbox.error,
                                                                  PeerLostError)}
        for state in self._peers.values():
            state.fail(error)
        self._closed = True
        lingering = []
        for state in self._peers.values():
            if state.dialing is not None:
                state.dialing.cancel()
            connection = state.connection
            transport = connection.transport if connection is not None else None
            if connection is None or transport is None or transport.is_closing():
                continue
            tls = self.settings.tls is not None
            if (connection.ready.done() and (transport.can_write_eof() or tls)
                    and id(state) not in lost and goodbye):  # else: it is lost for them
                # GOODBYE after this rank's last frames, so the peer can tell
                # leaving from dying; then half-close and keep reading (and
                # discarding) until the peer closes too. Closing with unread
                # data would send a reset, and a reset can destroy frames not
                # yet read on the other side, such as the ABORTs just sent.
                asyncio.ensure_future(connection.send_frame(
                    FrameKind.GOODBYE, (0, 0, 0), memoryview(b""))).add_done_callback(_retrieve)
                connection.half_closed = True
                connection.read_from_peer(True)  # drain, even past the early-frame bound
                if tls:
                    # TLS has no half-close: closing sends what is queued, then its
                    # close_notify, and reads (discarding) until the peer's comes.
                    transport.close()
                else:
                    try:
                        transport.write_eof()
                    except OSError:
                        # The peer reset the connection before this rank read that
                        # it did (a refused handshake): there is no one to linger for.
                        transport.abort()
                        continue
                lingering.append(connection.closed)
            else:
                transport.close()
        if lingering:
            await asyncio.wait(lingering, timeout=LINGER_S)
        for connection in [*(c.connection for c in self._peers.values()), *self._accepted]:
            if connection is not None:
                if connection.transport is not None:
                    connection.transport.close()
                # Unmapped here, before close returns, not at connection_lost's turn.
                connection.shm.close(error)
        if self._server is not None:
            await close_server(self._server, "this rank's data port", HANDSHAKE_TIMEOUT_S,
                               log)

    # -- internals ----------------------------------------------------------------

    def _accept(self) -> PeerConnection:
        connection = PeerConnection(self, None)
        self._accepted.add(connection)
        # Dropped if its handshake never completes; the timer ends with it, not to keep the mesh.
        timer = self.loop.call_later(HANDSHAKE_TIMEOUT_S, self._drop_if_silent, connection)
        connection.ready.add_done_callback(lambda _: timer.cancel())
        return connection

    def _drop_if_silent(self, connection: PeerConnection) -> None:
        if not connection.ready.done() and connection.transport is not None:
            log.warning("dropping a data connection from %s that sent no handshake within "
                        "%s s", connection.transport.get_extra_info("peername"),
                        HANDSHAKE_TIMEOUT_S)
            connection.transport.abort()

    def _peer(self, peer: int) -> PeerState:
        state = self._peers.get(peer)
        if state is None:
            inbox = Inbox(peer, lambda: self.listener, self.settings.early_limit_bytes,
                          self._early_count)
            inbox.on_early = self._early_frame
            state = self._peers[peer] = PeerState(inbox)
        return state

    def _attach(self, state: PeerState, connection: PeerConnection) -> None:
        state.connection = connection
        state.inbox.on_full = lambda full: connection.read_from_peer(not full)

    def _early_frame(self, peer: int, tag: Tag, fingerprint: Fingerprint) -> None:
        if self.listener is not None and not self._closed:
            self.listener.early_frame(peer, tag, fingerprint)

    def _connected_peer(self, peer: int) -> PeerState:
        state = self._peer(peer)
        if (state.connection is None and state.dialing is None and state.error is None
                and peer > self._rank and not self._closed):
            state.dialing = self.loop.create_task(self._dial(peer))
        return state

    async def _dial(self, peer: int) -> None:
        state = self._peer(peer)
        if state.address is None:
            state.fail(PeerLostError(f"rank {peer} is not in this job's directory",
                                     rank=peer))
            return
        host, port = state.address
        if not port and self._resolve is not None:
            try:
                host, port = state.address = await self._resolve(peer)
            except AsyncollError as exc:  # its request says what was asked
                state.fail(exc)
                return
        connection: PeerConnection | None = None
        try:
            async with timeout_after(HANDSHAKE_TIMEOUT_S):
                tls = self.settings.tls
                _, connection = await self.loop.create_connection(
                    lambda: PeerConnection(self, peer), host, port,
                    ssl=tls.client if tls is not None else None,
                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if tls is not None else None)
                self._attach(state, connection)
                await connection.ready
            state.settled.set()
        except ssl.SSLError as exc:  # the TLS handshake failed
            refused = tls_handshake.refusal(
                exc, f"rank {peer}'s data port at {join_host_port(host, port)}",
                mutual=self.settings.tls is not None and self.settings.tls.mutual)
            log.warning("%s", refused)
            state.fail(refused)
        except AsyncollError as exc:  # refused by the peer during the handshake
            log.warning("rank %d refused this rank's data connection: %s", peer, exc)
            state.fail(exc)
            if connection is not None and connection.transport is not None:
                connection.transport.abort()
        except (OSError, TimeoutError) as exc:
            error = PeerLostError(
                f"could not connect to rank {peer} at {join_host_port(host, port)}, the "
                f"address it advertised from host {state.hostname}: "
                f"{str(exc) or 'timed out'}; if that address is not reachable from here, "
                "set ASYNCOLL_ADVERTISE_ADDR or "
                "ASYNCOLL_SOCKET_IFNAME for that rank", rank=peer, host=state.hostname)
            error.__cause__ = exc
            state.fail(error)
            if connection is not None and connection.transport is not None:
                connection.transport.abort()

    async def _send_when_ready(self, peer: int, tag: Tag, payload: memoryview,
                               fingerprint: Fingerprint) -> None:
        state = self._peer(peer)
        await state.settled.wait()
        error = state.error or self._failed_channels.get(tag[0])  # failed while it dialed
        if error is not None:
            raise error
        connection = state.connection
        assert connection is not None  # settled without error: connected
        if self._through_shm(state, payload):
            await connection.shm.send(tag, payload, fingerprint)
        else:
            await connection.send_frame(FrameKind.DATA, tag, payload, fingerprint)

    def _through_shm(self, state: PeerState, payload: memoryview) -> bool:
        threshold = self.settings.shm_min_bytes
        return bool(threshold) and state.same_host and payload.nbytes >= threshold

