"""TLS handshakes: the accepting side's on the event loop, the links' on plain sockets,
and a failed one worded for the side that sees it.

A listener with TLS on accepts plain TCP and starts TLS itself
(:class:`TlsServer`), so that a handshake that fails is logged with its
reason, and so that a peer without TLS hears why it is refused: asyncoll's
listeners speak first, so such a peer sends nothing and waits, where a TLS
client sends its hello at once. A connection silent for :data:`SILENCE_S`,
or whose first byte is plain text, is told, in plain text and in its own
protocol, that TLS is required. The
reverse, a TLS client at a listener without TLS, is seen at once on both
sides: the client reads a plain greeting where a TLS record belongs, and the
listener a TLS record (:func:`looks_like_tls`) where a message belongs.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Protocol, TypeVar

from asyncoll._compat import timeout as timeout_after
from asyncoll._defaults import HANDSHAKE_TIMEOUT_S
from asyncoll._tls.context import (
    CA_VARIABLE,
    CERT_VARIABLE,
    KEY_VARIABLE,
    SAME_EVERYWHERE,
    Tls,
)
from asyncoll.errors import AuthenticationError

log = logging.getLogger("asyncoll")

T = TypeVar("T")

#: Seconds a TLS listener waits for a client's hello before it takes the
#: client for one without TLS (which waits for the listener to speak first).
SILENCE_S = 2.0

#: Seconds a listener out of descriptors waits before it accepts again, and between
#: two log lines that say so.
OUT_OF_DESCRIPTORS_PAUSE_S, OUT_OF_DESCRIPTORS_LOG_S = 0.1, 10.0
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

#: The first bytes of a TLS handshake record (type 22, version 3.x).
_TLS_RECORD = b"\x16\x03"

#: Reasons OpenSSL gives when the other side sent something that is not TLS.
_NOT_TLS = {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
            "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_TOO_LARGE"}
#: Alerts that mean this side's certificate did not pass the other side's check.
_OUR_CERTIFICATE = {"TLSV13_ALERT_CERTIFICATE_REQUIRED", "TLSV1_ALERT_UNKNOWN_CA",
                    "SSLV3_ALERT_BAD_CERTIFICATE", "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
                    "SSLV3_ALERT_HANDSHAKE_FAILURE", "TLSV1_ALERT_DECRYPT_ERROR"}


def looks_like_tls(first: bytes) -> bool:
    """Whether ``first``, the first bytes a peer sent, open a TLS handshake."""
    return first[:2] == _TLS_RECORD


def plaintext_peer_words(what: str) -> str:
    """What a listener without TLS says of ``what`` (a connection) that began with TLS."""
    return (f"{what} began a TLS handshake, but this process has no TLS "
            f"({CERT_VARIABLE} unset); {SAME_EVERYWHERE}")


def requires_tls_words(what: str) -> str:
    """What a TLS listener tells ``what`` (itself) to a peer that does not speak TLS."""
    return (f"{what} requires TLS and this peer connected without it; {SAME_EVERYWHERE}")


def refusal(exc: BaseException, other: str, *, mutual: bool,
            accepting: bool = False) -> AuthenticationError:
    """The error a failed handshake with ``other`` (``"the coordinator at H:P"``) raises.

    Args:
        exc: what the handshake, or the first read after it, raised.
        other: the other side, in words.
        mutual: whether this side runs mutual TLS (has a CA).
        accepting: whether this side accepted the connection.
    """
    reason = getattr(exc, "reason", None) or ""
    detail = f"{exc}".strip() or type(exc).__name__
    if reason in _NOT_TLS:
        text = (f"{other} does not speak TLS (it sent plain text: {detail}); "
                f"{SAME_EVERYWHERE}")
    elif reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
        text = (f"{other} showed no certificate, and {CA_VARIABLE} makes this process "
                f"require one ({detail}); set {CERT_VARIABLE} and {KEY_VARIABLE} there to a "
                f"certificate signed by the CA in {CA_VARIABLE}")
    elif reason == "CERTIFICATE_VERIFY_FAILED":
        text = (f"{other} showed a certificate that the CA in {CA_VARIABLE} did not sign "
                f"({detail}); give every process a certificate signed by one CA, and set "
                f"{CA_VARIABLE} to that CA everywhere")
    elif reason in _OUR_CERTIFICATE:
        text = (f"{other} refused this process's certificate ({detail}); set "
                f"{CERT_VARIABLE} and {KEY_VARIABLE} to a certificate signed by the CA the "
                f"others trust ({CA_VARIABLE})")
    elif accepting and isinstance(exc, ConnectionError):
        text = (f"{other} closed the connection during the TLS handshake ({detail}): it "
                "refused this process's certificate, most likely (not signed by the CA it "
                f"trusts); {SAME_EVERYWHERE}")
    elif isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        text = (f"the TLS handshake with {other} did not finish within "
                f"{HANDSHAKE_TIMEOUT_S} s; {SAME_EVERYWHERE}")
    else:
        text = f"the TLS handshake with {other} failed ({detail}); {SAME_EVERYWHERE}"
    error = AuthenticationError(text)
    error.__cause__ = exc
    return error


def closed_after_handshake(other: str) -> AuthenticationError:
    """The error of a connection that ``other`` closed right after the TLS handshake.

    TLS 1.3 checks the client's certificate after the client's handshake is
    done, and asyncio's acceptor closes without an alert: a refused
    certificate looks like this to the client.
    """
    return AuthenticationError(
        f"{other} closed the connection right after the TLS handshake: it did not accept "
        f"this process's certificate (none, or not signed by the CA it trusts); set "
        f"{CERT_VARIABLE} and {KEY_VARIABLE} to a certificate signed by the CA in its "
        f"{CA_VARIABLE}")


class Admission(Protocol):
    """What a listener asks before it starts a handshake: whether to take a connection
    (``enter``: a ticket, or None to close it), and when it is done with it (``leave``)."""

    def enter(self, close: Callable[[], None], now: float) -> int | None: ...

    def leave(self, ticket: int) -> None: ...


class TlsServer:
    """A listening socket whose connections speak TLS before ``make()``'s protocol gets them.

    What ``loop.create_server`` gives, for the parts asyncoll uses (``sockets``,
    ``close``, ``wait_closed``): a listener that starts TLS itself can log a
    failed handshake's reason, and can tell a peer without TLS why it is refused.

    Args:
        tls: this process's contexts (with a server context).
        make: the protocol each connection gets once its handshake is done.
        refuse_plain: the bytes that tell a peer without TLS why it is refused,
            in the listener's own plain protocol.
        what: the listener, in words ("the coordinator", "this rank's data port").
        admission: asked before each handshake (None: every connection is taken).
    """

    def __init__(self, tls: Tls, make: Callable[[], asyncio.BaseProtocol],
                 refuse_plain: bytes, what: str, admission: Admission | None = None) -> None:
        self._tls = tls
        self._admission = admission
        self._make = make
        self._refuse_plain = refuse_plain
        self._what = what
        self.sockets: list[socket.socket] = []
        self._accepting: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, backlog: int = 100) -> None:
        """Listen on ``host:port`` (0: a free port) and start accepting.

        Raises:
            OSError: the address cannot be bound.
        """
        loop = asyncio.get_running_loop()
        family, kind, proto, _, address = (await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE))[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.sockets = [sock]
        self._accepting = loop.create_task(self._accept_forever(sock))

    def close(self) -> None:
        """Stop accepting; handshakes under way are cancelled."""
        if self._accepting is not None:
            self._accepting.cancel()
        for task in self._handshakes:
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        """Wait for the accepting task and the handshakes to end."""
        tasks = [*self._handshakes, *([self._accepting] if self._accepting else [])]
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept_forever(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        logged = float("-inf")
        while True:
            try:
                sock, address = await loop.sock_accept(listener)
            except (ConnectionAbortedError, InterruptedError):
                continue  # gone before it was taken
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                # Those waiting stay in the backlog until descriptors are free again.
                if loop.time() - logged >= OUT_OF_DESCRIPTORS_LOG_S:
                    logged = loop.time()
                    log.warning("%s cannot accept a connection: %s; raise the open-files "
                                "limit (ulimit -n)", self._what, exc)
                await asyncio.sleep(OUT_OF_DESCRIPTORS_PAUSE_S)
                continue
            self._start(loop, sock, address)

    def _start(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
               address: object) -> None:
        """Start the handshake of an accepted connection, if the admission takes it."""
        started: list[asyncio.Task[None]] = []
        ticket = None
        if self._admission is not None:
            # Evicted, the handshake is cancelled and the socket closed.
            ticket = self._admission.enter(lambda: _abandon(started[0], sock), loop.time())
            if ticket is None:
                sock.close()
                return
        task = loop.create_task(self._handshake(sock, address))
        started.append(task)
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)
        if ticket is not None:
            held = ticket
            task.add_done_callback(lambda _: self._leave(held))

    def _leave(self, ticket: int) -> None:
        if self._admission is not None:
            self._admission.leave(ticket)

    async def _handshake(self, sock: socket.socket, address: object) -> None:
        loop = asyncio.get_running_loop()
        where = (f"{address[0]}:{address[1]}" if isinstance(address, tuple) else "?")
        try:
            sock.setblocking(False)
            first = await _first_byte(sock, SILENCE_S)
            if first == b"":
                sock.close()  # closed without a word: a probe, not worth a warning
                return
            if first is None or first != _TLS_RECORD[:1]:
                # Silent, or plain text where a TLS hello belongs (a coordinator's peer
                # nudges a listener that does not greet it): told in its own protocol.
                said = (f"it sent no TLS hello within {SILENCE_S} s" if first is None else
                        "it sent plain text where a TLS hello belongs")
                log.warning("refused a connection from %s to %s: %s, so it does not speak "
                            "TLS; %s", where, self._what, said, SAME_EVERYWHERE)
                with contextlib.suppress(OSError):
                    sock.send(self._refuse_plain)
                sock.close()
                return
            async with timeout_after(HANDSHAKE_TIMEOUT_S):
                await loop.connect_accepted_socket(
                    self._make, sock, ssl=self._tls.server,
                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            words = refusal(exc, f"the peer at {where}", mutual=self._tls.mutual,
                            accepting=True)
            log.warning("refused a connection to %s: %s", self._what, words)
            sock.close()
        except BaseException:
            sock.close()
            raise


def _abandon(task: asyncio.Task[None], sock: socket.socket) -> None:
    """Cancel a handshake, and close its socket even if it never started."""
    if task.cancel():
        task.add_done_callback(lambda _: sock.close())


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _first_byte(sock: socket.socket, seconds: float) -> bytes | None:
    """The connection's first byte, left unread (b"": it ended; None: nothing within
    ``seconds``)."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()
    loop.add_reader(sock.fileno(), _settle, readable)
    try:
        async with timeout_after(seconds) as deadline:
            await readable
    except TimeoutError:
        if not deadline.expired():
            raise
        return None
    finally:
        loop.remove_reader(sock.fileno())
    try:
        return sock.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return b"\x16"  # let the handshake find out
    except OSError:
        return b""


async def drive(sock: ssl.SSLSocket, call: Callable[[], T]) -> T:
    """Run ``call`` (a non-blocking step of ``sock``: a handshake, a send, a recv) on the
    event loop until it no longer wants to read or write; return its result.

    The caller puts a deadline around it.
    """
    loop = asyncio.get_running_loop()
    while True:
        try:
            return call()
        except ssl.SSLWantReadError:
            add, remove = loop.add_reader, loop.remove_reader
        except ssl.SSLWantWriteError:
            add, remove = loop.add_writer, loop.remove_writer
        ready: asyncio.Future[None] = loop.create_future()
        add(sock.fileno(), _settle, ready)
        try:
            await ready
        finally:
            remove(sock.fileno())


def wrap(tls: Tls, sock: socket.socket, *, server_side: bool) -> ssl.SSLSocket:
    """``sock``, connected, wrapped for TLS; its handshake is not done yet (see :func:`drive`,
    or call ``do_handshake`` on a blocking socket)."""
    context = tls.server if server_side else tls.client
    assert context is not None
    return context.wrap_socket(sock, server_side=server_side, do_handshake_on_connect=False)
