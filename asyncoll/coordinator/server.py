"""The coordinator daemon's asyncio server: the I/O shell around RendezvousState."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable, Sequence
from typing import SupportsIndex

from asyncoll import _auth
from asyncoll._compat import close_server, timeout as timeout_after
from asyncoll._rendezvous.control import read_message, write_message
from asyncoll._rendezvous.directory import PORTS_IN_WELCOME_UP_TO
from asyncoll._rendezvous.state import Reply, RendezvousState
from asyncoll._defaults import COORDINATOR_TICK_S, DEFAULT_PORT, HANDSHAKE_TIMEOUT_S
from asyncoll._wire.endpoint import join_host_port
from asyncoll._tls.context import Tls
from asyncoll._tls.handshake import TlsServer, requires_tls_words
from asyncoll._wire.messages import Challenge, Error, Proof, encode, encode_head, frame
from asyncoll.coordinator.admission import (
    LEAST_PENDING,
    LISTEN_BACKLOG,
    RENDEZVOUS_SHARE,
    Budget,
    Door,
    descriptor_budget,
)
from asyncoll.coordinator.http import HttpServer
from asyncoll.errors import AuthenticationError, ConfigurationError, ProtocolError

log = logging.getLogger("asyncoll.coordinator")



class Coordinator:
    """A rendezvous coordinator serving any number of jobs on one TCP port.

    Run it inside an event loop: ``await coordinator.start()``, then
    ``await coordinator.stop()``. The ``asyncoll-coordinator`` command and the
    embedded coordinators of asyncoll-run and of env:// rank 0 are this class.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 token: bytes | None = None, tls: Tls | None = None,
                 metrics_port: int | None = None,
                 ports_in_welcome_up_to: int = PORTS_IN_WELCOME_UP_TO,
                 http_port: int | None = None, http_host: str = "127.0.0.1",
                 allowed_hosts: Sequence[str] = (), http_public: bool = False) -> None:
        """Serve on ``host:port``; with ``token``, every connection must prove it; with
        ``tls``, every connection speaks TLS (mutual with a CA).

        A job of more than ``ports_in_welcome_up_to`` ranks learns most of its
        members' data ports on demand (see asyncoll._rendezvous.directory).

        With ``http_port`` (0: a free one), the dashboard, its JSON and the
        Prometheus metrics are served on ``http_host:http_port`` (see
        asyncoll.coordinator.http), under the coordinator's token and TLS, to
        requests whose Host header is one of ``allowed_hosts`` (empty: any). Without
        a token or mutual TLS it shows the page and the JSON only to clients on this
        host, unless ``http_public``.
        ``metrics_port`` is the same server on ``host``, as it was before the
        dashboard, and needs the metrics.

        Connections that have not authenticated are bounded on each port, and
        all of them by the open-files limit (asyncoll.coordinator.admission).

        Raises:
            ConfigurationError: metrics are asked for and prometheus_client is missing,
                or both ports are given.
        """
        self.host = host
        self.port = port
        self._token = token
        self._tls = tls
        self._state = RendezvousState(ports_in_welcome_up_to)
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._conn_ids = itertools.count(1)
        self._server: asyncio.Server | TlsServer | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        # Set by stop(): the members it disconnects are not lost, they will be
        # back with the next coordinator (and 4096 of them would be 4096 warnings).
        self._stopping = False
        budget = Budget(descriptor_budget())
        self._door = Door(budget, max(LEAST_PENDING, budget.capacity // RENDEZVOUS_SHARE),
                          "the rendezvous port")
        if http_port is not None and metrics_port is not None:
            raise ConfigurationError("give --http-port or --metrics-port, not both: "
                                     "--metrics-port is the old name of the same server")
        served = http_port if metrics_port is None else metrics_port
        #: The dashboard, /api and /metrics (None: not served).
        self.http = None if served is None else HttpServer(
            self._state, host if metrics_port is not None else http_host, served, token, tls,
            metrics=metrics_port is not None, address=lambda: join_host_port(host, self.port),
            budget=budget, allowed_hosts=allowed_hosts, public=http_public)

    async def start(self) -> None:
        """Bind and start serving; ``self.port`` is then the bound port.

        Raises:
            OSError: the address cannot be bound (in use, not local).
        """
        if self._tls is None:
            self._server = await asyncio.get_running_loop().create_server(
                self._stream_protocol, self.host, self.port, backlog=LISTEN_BACKLOG)
        else:
            refusal = Error(code="authentication",
                            message=requires_tls_words("the coordinator"))
            self._server = TlsServer(self._tls, self._stream_protocol, encode(refusal),
                                     "the coordinator", admission=self._door)
            await self._server.start(self.host, self.port, LISTEN_BACKLOG)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())
        log.info("coordinator listening on %s", join_host_port(self.host, self.port))
        if self.http is not None:
            await self.http.start()

    async def stop(self) -> None:
        """Stop accepting, close every connection and wait for the handlers to end."""
        if self._server is None:
            return
        self._stopping = True
        self._server.close()
        if self.http is not None:
            await self.http.stop()
        if self._ticker is not None:
            self._ticker.cancel()
        for writer in list(self._writers.values()):
            writer.close()
        # Closing a connection ends its handler; one that does not end in time
        # is cancelled.
        if self._handlers:
            _, stuck = await asyncio.wait(list(self._handlers), timeout=HANDSHAKE_TIMEOUT_S)
            if stuck:
                log.warning("%d connections were still being served %s s after they were "
                            "closed; cancelled", len(stuck), HANDSHAKE_TIMEOUT_S)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
        await close_server(self._server, "the coordinator", HANDSHAKE_TIMEOUT_S, log)
        self._server = None
        log.info("coordinator on %s stopped", join_host_port(self.host, self.port))

    def job_is_active(self, job: str | None) -> bool:
        """Whether ``job`` (None: any job) still has peers waiting or members that have not
        left."""
        return self._state.job_is_active(job)

    async def wait_until_idle(self, job: str | None, timeout: float) -> bool:
        """Wait up to ``timeout`` s for every member of ``job`` (None: of every job) to
        leave; True if they did."""
        if self._server is None:
            return True  # stopped (or never started): nobody can leave any more
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._state.job_is_active(job) and loop.time() < deadline:
            await asyncio.sleep(COORDINATOR_TICK_S)
        return not self._state.job_is_active(job)

    def _stream_protocol(self) -> asyncio.StreamReaderProtocol:
        """What asyncio.start_server would give each connection, with a reader that notes
        whether the peer said anything."""
        return asyncio.StreamReaderProtocol(_Listening(), self._serve_connection)

    async def _serve_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # always inside a task here
        ticket = self._door.enter(writer.close, asyncio.get_running_loop().time())
        if ticket is None:
            # Out of descriptors: the greeting says so, where a closed connection
            # would leave the peer to guess.
            write_message(writer, Error(code="rendezvous", message=_out_of_descriptors(
                self._door.budget.held)))
            writer.close()
            return
        self._handlers.add(task)
        conn = next(self._conn_ids)
        self._writers[conn] = writer
        peer = writer.get_extra_info("peername")
        try:
            if await self._authenticate(conn, reader, writer):
                if self._token is not None:
                    self._door.admit(ticket)
                await self._read_requests(conn, reader, peer, ticket)
        except AuthenticationError as exc:
            log.warning("refused the connection from %s: %s", peer, exc)
            self._send([Reply(conn, 0, Error(code="authentication", message=str(exc)))])
        except ProtocolError as exc:
            log.warning("closing the connection from %s: %s", peer, exc)
            self._send([Reply(conn, 0, Error(code="protocol", message=str(exc)))])
        except (OSError, asyncio.IncompleteReadError) as exc:
            if isinstance(reader, _Listening) and not reader.heard:
                # A health probe, a port scan: they connect and leave, often with a
                # reset (the greeting unread), every few seconds for as long as
                # the daemon runs.
                log.debug("connection from %s ended before it said anything: %s", peer, exc)
            else:
                log.info("connection from %s broke: %s", peer, exc)
        except asyncio.CancelledError:
            # Only stop() cancels a handler. Ending quietly keeps asyncio's
            # stream machinery from logging the cancellation as an error.
            pass
        finally:
            self._door.leave(ticket)
            self._handlers.discard(task)
            del self._writers[conn]
            if not self._stopping:
                self._send(self._state.disconnect(conn, asyncio.get_running_loop().time()))
            writer.close()

    async def _authenticate(self, conn: int, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> bool:
        """Challenge the connection; with a secret, nothing else is read before the proof.

        Returns False when the connection closed without a word (a health check's
        probe, say), which is not worth a warning.
        """
        nonce = _auth.new_nonce()
        write_message(writer, Challenge(nonce=nonce, required=int(self._token is not None)))
        if self._token is None:
            return True
        try:
            async with timeout_after(HANDSHAKE_TIMEOUT_S):
                item = await read_message(reader)
        except TimeoutError:
            raise AuthenticationError(f"no proof of the shared secret within "
                                      f"{HANDSHAKE_TIMEOUT_S} s of connecting") from None
        if item is None:
            return False
        if not isinstance(item[1], Proof):
            raise AuthenticationError(f"the coordinator needs the shared secret "
                                      f"(ASYNCOLL_TOKEN) and the peer sent a {item[1].TYPE} "
                                      "message instead of its proof")
        proof = item[1]
        if not _auth.verify(self._token, "coordinator", nonce, proof.response):
            raise AuthenticationError("wrong shared secret: the peer's ASYNCOLL_TOKEN differs "
                                      "from the coordinator's")
        # Prove it back, so a peer cannot be fooled by an impostor coordinator.
        self._send([Reply(conn, item[0], Proof(
            response=_auth.answer(self._token, "coordinator/server", proof.nonce), nonce=""))])
        return True

    async def _read_requests(self, conn: int, reader: asyncio.StreamReader,
                             peer: object, ticket: int) -> None:
        loop = asyncio.get_running_loop()
        first = True
        while True:
            if first:
                # A connection that says nothing is dropped; after the join a
                # member may legitimately stay silent for a long time.
                try:
                    async with timeout_after(HANDSHAKE_TIMEOUT_S):
                        item = await read_message(reader)
                except TimeoutError:
                    raise ProtocolError(f"no request within {HANDSHAKE_TIMEOUT_S} s of "
                                        "connecting") from None
                first = False
                self._door.admit(ticket)  # without a token, a request is all it shows
            else:
                item = await read_message(reader)
            if item is None:
                return
            request_id, message = item
            self._send(self._state.handle(conn, request_id, message, loop.time()))

    async def _tick_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(COORDINATOR_TICK_S)
            self._send(self._state.tick(loop.time()))

    def _send(self, replies: list[Reply]) -> None:
        # One message often goes to many members (a group's creation, a
        # notice): it is encoded once, and each copy gets its request id.
        heads: dict[int, list[bytes]] = {}
        for reply in replies:
            writer = self._writers.get(reply.conn)
            if writer is None or writer.is_closing():
                continue
            head = heads.get(id(reply.message))
            if head is None:
                head = heads[id(reply.message)] = encode_head(reply.message)
            writer.writelines(frame(head, reply.request_id))


class _Listening(asyncio.StreamReader):
    """A connection's reader that notes whether any byte ever came."""

    heard = False

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        # (asyncio passes bytes; the type is typeshed's.)
        if data:
            self.heard = True
        super().feed_data(data)


def _out_of_descriptors(held: int) -> str:
    return (f"it is out of file descriptors ({held} connections are open, all that its "
            "open-files limit allows); raise that limit where it runs (ulimit -n, or "
            "LimitNOFILE= under systemd), or spread the jobs over more coordinators")
