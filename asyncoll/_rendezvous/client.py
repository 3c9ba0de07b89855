"""A peer's connection to the coordinator: requests and their replies."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
from collections.abc import Callable

from asyncoll import _auth
from asyncoll._compat import timeout as timeout_after
from asyncoll._tls import handshake as tls_handshake
from asyncoll._tls.context import Tls
from asyncoll._rendezvous.control import read_message, write_message
from asyncoll._defaults import (
    CONNECT_RETRY_INTERVAL_S,
    HANDSHAKE_TIMEOUT_S,
    MAX_COORDINATOR_REPLY_BYTES,
)
from asyncoll._wire.endpoint import join_host_port
from asyncoll._wire.messages import (
    Challenge,
    Error,
    MemberGone,
    MembersLeft,
    MembersPending,
    Message,
    Proof,
)
from asyncoll.errors import (
    AsyncollError,
    AuthenticationError,
    ProtocolError,
    RendezvousError,
    RendezvousTimeoutError,
    error_from_code,
)

log = logging.getLogger("asyncoll.rendezvous")


async def open_with_retry(host: str, port: int, timeout: float, tls: Tls | None = None
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to ``host:port``, retrying while it refuses, for up to ``timeout`` seconds.

    A coordinator may start after its workers (torch's store behaves the same),
    so a refused connection is retried until the deadline. With ``tls``, the
    connection speaks TLS; a failed TLS handshake is not retried.

    Raises:
        RendezvousTimeoutError: nothing accepted the connection in time.
        AuthenticationError: the TLS handshake failed (the message says why).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: OSError | None = None
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise RendezvousTimeoutError(
                f"could not reach the coordinator at {join_host_port(host, port)} within "
                f"{timeout:.1f} s "
                f"(last error: {last}); start it (asyncoll-coordinator --host {host} --port "
                f"{port}) or check MASTER_ADDR/MASTER_PORT") from last
        try:
            async with timeout_after(min(remaining, HANDSHAKE_TIMEOUT_S)):
                if tls is None:
                    return await asyncio.open_connection(host, port)
                return await asyncio.open_connection(
                    host, port, ssl=tls.client, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except ssl.SSLError as exc:
            raise tls_handshake.refusal(exc, f"the coordinator at {join_host_port(host, port)}",
                                        mutual=tls is not None and tls.mutual) from exc
        except (OSError, TimeoutError) as exc:
            last = exc if isinstance(exc, OSError) else OSError(f"connect timed out: {exc}")
        await asyncio.sleep(min(CONNECT_RETRY_INTERVAL_S, max(0.0, deadline - loop.time())))


async def _answer_challenge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            address: str, token: bytes | None, tls: Tls | None = None) -> None:
    """Read the coordinator's challenge and, if it asks, prove the shared secret."""
    try:
        async with timeout_after(HANDSHAKE_TIMEOUT_S):
            item = await read_message(reader)
            if item is not None and isinstance(item[1], Error):  # a TLS coordinator's refusal
                raise error_from_code(item[1].code, f"the coordinator at {address} refused "
                                                    f"this peer: {item[1].message}")
            if item is None and tls is not None:
                raise tls_handshake.closed_after_handshake(f"the coordinator at {address}")
            if item is None or not isinstance(item[1], Challenge):
                raise ProtocolError(f"{address} did not greet like an asyncoll coordinator")
            challenge = item[1]
            if not challenge.required and token is None:
                return
            if not challenge.required:
                raise AuthenticationError(
                    f"the coordinator at {address} asks for no shared secret, but this peer "
                    "has ASYNCOLL_TOKEN set: it cannot prove it is the job's coordinator. "
                    "Start it with --token-file (or the same ASYNCOLL_TOKEN), or unset "
                    "ASYNCOLL_TOKEN here")
            if token is None:
                raise AuthenticationError(
                    f"the coordinator at {address} requires the job's shared secret: set "
                    "ASYNCOLL_TOKEN (or pass --token-file to asyncoll-run)")
            mine = _auth.new_nonce()
            write_message(writer, Proof(response=_auth.answer(token, "coordinator",
                                                              challenge.nonce), nonce=mine), 1)
            reply = await read_message(reader)
    except TimeoutError:
        raise RendezvousTimeoutError(f"the coordinator at {address} did not finish the "
                                     f"handshake within {HANDSHAKE_TIMEOUT_S} s") from None
    except ssl.SSLError as exc:
        raise tls_handshake.refusal(exc, f"the coordinator at {address}",
                                    mutual=tls is not None and tls.mutual) from exc
    except (OSError, asyncio.IncompleteReadError) as exc:
        raise RendezvousError(f"lost the connection to the coordinator at {address} during "
                              f"the handshake: {exc}") from exc
    if reply is not None and isinstance(reply[1], Error):
        raise error_from_code(reply[1].code, f"the coordinator at {address} refused this "
                                             f"peer: {reply[1].message}")
    if reply is None or not isinstance(reply[1], Proof):
        raise AuthenticationError(f"the coordinator at {address} closed the connection after "
                                  "this peer's proof of the shared secret")
    if not _auth.verify(token, "coordinator/server", mine, reply[1].response):
        raise AuthenticationError(f"the coordinator at {address} accepted this peer but did "
                                  "not prove the shared secret in return: it is not the "
                                  "job's coordinator")


class CoordinatorClient:
    """One control connection; many requests may be outstanding on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 address: str) -> None:
        self._reader = reader
        self._writer = writer
        self.address = address
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._closed: AsyncollError | None = None
        #: Called with each notice the coordinator sends unasked (a member gone).
        self.on_notice: Callable[[Message], None] | None = None
        #: The newest membership event the notices told of (their job's epoch).
        self.heard_epoch = 0
        #: Called once, with the error, when the connection to the coordinator ends.
        self.on_lost: Callable[[AsyncollError], None] | None = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read_replies())

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float,
                      token: bytes | None = None, tls: Tls | None = None
                      ) -> CoordinatorClient:
        """Connect to the coordinator at ``host:port`` (see :func:`open_with_retry`).

        Answers the coordinator's challenge with ``token`` (None: this peer has no secret),
        over TLS with ``tls`` (None: plain TCP).

        Raises:
            AuthenticationError: the coordinator needs a secret this peer lacks, or
                refused the one it has.
            ProtocolError: the other side is not an asyncoll coordinator.
        """
        reader, writer = await open_with_retry(host, port, timeout, tls)
        address = join_host_port(host, port)
        try:
            await _answer_challenge(reader, writer, address, token, tls)
        except BaseException:
            writer.close()
            raise
        return cls(reader, writer, address)

    @property
    def lost(self) -> AsyncollError | None:
        """Why the connection ended (None while it is up)."""
        return self._closed

    @property
    def local_host(self) -> str:
        """The local address of this connection: the interface that reaches the coordinator."""
        return str(self._writer.get_extra_info("sockname")[0])

    async def request(self, message: Message, timeout: float, what: str) -> Message:
        """Send ``message`` and return its reply.

        Args:
            message: the request.
            timeout: seconds to wait for the reply.
            what: the request in words, for the timeout message.

        Raises:
            AsyncollError: the coordinator answered with an error (mapped to its class).
            RendezvousTimeoutError: no reply within ``timeout``.
            RendezvousError: the connection to the coordinator is lost.
        """
        if self._closed is not None:
            raise self._closed
        request_id = next(self._ids)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            write_message(self._writer, message, request_id)
            async with timeout_after(timeout) as deadline:
                reply = await future
        except TimeoutError:
            if not deadline.expired():
                raise  # the reply's own error, a TimeoutError too: not this deadline's
            raise RendezvousTimeoutError(
                f"{what}: no answer from the coordinator at {self.address} within "
                f"{timeout:.1f} s") from None
        finally:
            self._pending.pop(request_id, None)
        if isinstance(reply, Error):
            raise error_from_code(reply.code, reply.message)
        return reply

    def notify(self, message: Message) -> None:
        """Send ``message``, which the coordinator does not answer (a heartbeat)."""
        if self._closed is None and not self._writer.is_closing():
            write_message(self._writer, message, 0)

    async def close(self) -> None:
        """Close the connection; outstanding requests fail with RendezvousError."""
        self._fail_pending(RendezvousError(f"the connection to the coordinator at "
                                           f"{self.address} was closed by this process"))
        self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader_task
        self._writer.close()
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            async with timeout_after(HANDSHAKE_TIMEOUT_S):
                await self._writer.wait_closed()

    async def _read_replies(self) -> None:
        error: AsyncollError
        try:
            while True:
                item = await read_message(self._reader, MAX_COORDINATOR_REPLY_BYTES)
                if item is None:
                    error = RendezvousError(f"the coordinator at {self.address} closed the "
                                            "connection")
                    break
                request_id, message = item
                future = self._pending.get(request_id)
                if future is not None and not future.done():
                    future.set_result(message)
                elif request_id == 0 and isinstance(message, (MemberGone, MembersLeft,
                                                               MembersPending)):
                    self._notice(message)
                elif request_id == 0 and isinstance(message, Error):
                    # The coordinator refused this connection as a whole.
                    error = error_from_code(message.code, f"the coordinator at {self.address} "
                                                          f"closed the connection: "
                                                          f"{message.message}")
                    break
                else:
                    log.debug("unexpected %s message from the coordinator (request %d)",
                              message.TYPE, request_id)
        except ProtocolError as exc:
            error = exc
        except (OSError, asyncio.IncompleteReadError) as exc:
            error = RendezvousError(f"lost the connection to the coordinator at "
                                    f"{self.address}: {exc}")
            error.__cause__ = exc
        first = self._closed is None
        self._fail_pending(error)
        if first and self.on_lost is not None:
            self.on_lost(error)

    def _notice(self, message: MemberGone | MembersLeft | MembersPending) -> None:
        self.heard_epoch = max(self.heard_epoch, message.epoch)
        if self.on_notice is not None:
            self.on_notice(message)

    def _fail_pending(self, error: AsyncollError) -> None:
        if self._closed is None:
            self._closed = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
