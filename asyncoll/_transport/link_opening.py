"""Opening a group's direct links: listening, dialling with a cookie, accepting.

The set-up runs on the event loop, once per group (asyncoll._group.links_path
sets the links up inside the group's first operation that takes them): it
listens, and opens the links between ring neighbours with :func:`dial` and
:func:`accept`. Every other link is opened later, in the calling thread,
the first time an algorithm needs it (asyncoll._transport.links, with
:class:`Dialling` and :func:`start_dial`), by the lower member of the pair.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from asyncoll._defaults import HANDSHAKE_TIMEOUT_S
from asyncoll._tls import handshake as tls_handshake
from asyncoll._tls.context import Tls
from asyncoll._wire.endpoint import join_host_port

log = logging.getLogger("asyncoll.transport")

#: Bytes a connecting member sends first: the acceptor's cookie, its own index.
GREETING = struct.Struct("<qq")
#: Connections a member's listening socket holds before it accepts them.
_BACKLOG = 128


@dataclass(frozen=True)
class Dialling:
    """What a member needs to open its links lazily, and to accept those opened to it.

    Attributes:
        server: its listening socket (kept open while the links are).
        me: its index in the group.
        cookie: what members dialling it must greet it with.
        addresses: every member's (host, port, cookie), by index.
        tls: the job's TLS, which every link speaks (None: plain TCP).
    """

    server: socket.socket
    me: int
    cookie: int
    addresses: Sequence[tuple[str, int, int]]
    tls: Tls | None = None


def listen(host: str) -> socket.socket:
    """A non-blocking listening socket on ``host``, any free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def dial(host: str, port: int, cookie: int, me: int,
               tls: Tls | None = None) -> socket.socket:
    """Connect to a member's listening socket and greet it with its cookie and our index.

    Raises:
        OSError: it could not connect (or the TLS handshake failed: an ssl.SSLError).
    """
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, (host, port))
        if tls is None:
            await loop.sock_sendall(sock, GREETING.pack(cookie, me))
        else:
            sock = secure = tls_handshake.wrap(tls, sock, server_side=False)
            await tls_handshake.drive(secure, secure.do_handshake)
            await tls_handshake.drive(secure, lambda: secure.send(GREETING.pack(cookie, me)))
    except BaseException:
        sock.close()
        raise
    return sock


async def accept(server: socket.socket, cookie: int, expected: set[int],
                 tls: Tls | None = None) -> dict[int, socket.socket]:
    """Accept one connection from every member index in ``expected``, checking greetings.

    A connection whose greeting lacks this member's cookie (anything else that
    found the port), or whose TLS handshake fails, is closed and ignored.
    """
    loop = asyncio.get_running_loop()
    got: dict[int, socket.socket] = {}
    while set(got) != expected:
        sock, address = await loop.sock_accept(server)
        try:
            sock.setblocking(False)
            if tls is not None:
                sock = await _secure(tls, sock, address)
            greeting = b""
            while len(greeting) < GREETING.size:
                chunk = await _recv(sock, GREETING.size - len(greeting))
                if not chunk:
                    break
                greeting += chunk
            if len(greeting) == GREETING.size:
                theirs, index = GREETING.unpack(greeting)
                if theirs == cookie and index in expected and index not in got:
                    got[index] = sock
                    continue
        except OSError:
            pass
        sock.close()
    return got


async def _secure(tls: Tls, sock: socket.socket, address: object) -> socket.socket:
    """The TLS side of an accepted link (OSError, logged, if its handshake fails)."""
    secure = tls_handshake.wrap(tls, sock, server_side=True)
    try:
        await tls_handshake.drive(secure, secure.do_handshake)
    except OSError as exc:
        log.warning("refused a direct link: %s", tls_handshake.refusal(
            exc, f"the peer at {address}", mutual=tls.mutual, accepting=True))
        secure.close()
        raise
    return secure


async def _recv(sock: socket.socket, nbytes: int) -> bytes:
    if isinstance(sock, ssl.SSLSocket):
        secure = sock
        return await tls_handshake.drive(secure, lambda: secure.recv(nbytes))
    return await asyncio.get_running_loop().sock_recv(sock, nbytes)


def open_secure(tls: Tls, host: str, port: int, timeout: float = HANDSHAKE_TIMEOUT_S
                ) -> ssl.SSLSocket:
    """Connect to a member's listening socket and finish the TLS handshake, blocking for
    up to ``timeout`` seconds each (the calling thread's links, opened lazily).

    Raises:
        OSError: it could not connect, or the handshake failed (an ssl.SSLError).
    """
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        secure = tls_handshake.wrap(tls, sock, server_side=False)
    except BaseException:
        sock.close()
        raise
    try:
        secure.do_handshake()
    except BaseException:
        secure.close()
        raise
    return secure


def accept_secure(tls: Tls, sock: socket.socket, timeout: float = HANDSHAKE_TIMEOUT_S
                  ) -> ssl.SSLSocket | None:
    """The TLS side of a link accepted in the calling thread, its handshake done blocking
    for up to ``timeout`` seconds; None (logged, closed) if the handshake failed."""
    try:
        where = join_host_port(*sock.getpeername()[:2])
    except OSError:
        where = "?"
    sock.settimeout(timeout)
    secure = tls_handshake.wrap(tls, sock, server_side=True)
    try:
        secure.do_handshake()
    except OSError as exc:
        log.warning("refused a direct link: %s", tls_handshake.refusal(
            exc, f"the peer at {where}", mutual=tls.mutual, accepting=True))
        secure.close()
        return None
    return secure


def start_dial(host: str, port: int, cookie: int, me: int) -> tuple[socket.socket, bytes]:
    """Begin connecting to a member's listening socket, without waiting.

    Returns the non-blocking socket and the greeting to send first, once
    connected (sending it before then is refused with EAGAIN).

    Raises:
        OSError: the connection could not even be started.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        code = sock.connect_ex((host, port))
        if code not in (0, errno.EINPROGRESS):
            raise OSError(code, f"cannot connect to {join_host_port(host, port)}: "
                                f"{errno.errorcode.get(code)}")
    except BaseException:
        sock.close()
        raise
    return sock, GREETING.pack(cookie, me)
