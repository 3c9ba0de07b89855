"""Opening a group's direct links: listening, dialling with a cookie, accepting.

Runs on the event loop, once per group (asyncoll._group.links_path sets
the links up inside the group's first operation that takes them); the
links themselves (asyncoll._transport.links) are then used from one thread.
"""

from __future__ import annotations

import asyncio
import socket
import struct

#: Bytes a connecting member sends first: the acceptor's cookie, its own index.
_GREETING = struct.Struct("<qq")


def listen(host: str) -> socket.socket:
    """A non-blocking listening socket on ``host``, any free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(64)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def dial(host: str, port: int, cookie: int, me: int) -> socket.socket:
    """Connect to a member's listening socket and greet it with its cookie and our index."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, (host, port))
        await loop.sock_sendall(sock, _GREETING.pack(cookie, me))
    except BaseException:
        sock.close()
        raise
    return sock


async def accept(server: socket.socket, cookie: int, expected: set[int]
                 ) -> dict[int, socket.socket]:
    """Accept one connection from every member index in ``expected``, checking greetings.

    A connection whose greeting lacks this member's cookie (anything else that
    found the port) is closed and ignored.
    """
    loop = asyncio.get_running_loop()
    got: dict[int, socket.socket] = {}
    while set(got) != expected:
        sock, _ = await loop.sock_accept(server)
        try:
            sock.setblocking(False)
            greeting = b""
            while len(greeting) < _GREETING.size:
                chunk = await loop.sock_recv(sock, _GREETING.size - len(greeting))
                if not chunk:
                    break
                greeting += chunk
            if len(greeting) == _GREETING.size:
                theirs, index = _GREETING.unpack(greeting)
                if theirs == cookie and index in expected and index not in got:
                    got[index] = sock
                    continue
        except OSError:
            pass
        sock.close()
    return got
