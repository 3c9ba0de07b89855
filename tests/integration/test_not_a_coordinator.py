"""init_process_group pointed at a server that is not an asyncoll coordinator fails at once.

A coordinator greets a peer as soon as it accepts it, so a server that says
nothing (torch's TCPStore, an HTTP server, anything that waits for its client
to speak first) is known not to be one within GREETING_TIMEOUT_S, and one that
sends something else is known at its first bytes. Each kind of wrong server
here makes init_process_group raise ProtocolError (RendezvousError where it
closes the connection) with a sentence naming its address, well before the
10 s handshake deadline that used to apply.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import asyncoll
from asyncoll._defaults import GREETING_TIMEOUT_S, HANDSHAKE_TIMEOUT_S
from asyncoll.errors import AsyncollError, ProtocolError, RendezvousError

pytestmark = pytest.mark.timeout(60)

#: What a wrong server may take to be found out: the greeting's bound plus a margin for a
#: loaded machine, and far below the handshake deadline it replaces.
FAILS_WITHIN_S = GREETING_TIMEOUT_S + 2.5
assert FAILS_WITHIN_S < HANDSHAKE_TIMEOUT_S


@contextlib.contextmanager
def server_that(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A server on a free port of 127.0.0.1 that runs ``answer`` on each connection (in a
    thread of its own) and then holds it open until the server ends; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            answer(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (Linux)
        listener.close()
        for conn in held:
            conn.close()
        thread.join(5)


def say_nothing(conn: socket.socket) -> None:
    del conn


def send(data: bytes) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendall(data)


def close_at_once(conn: socket.socket) -> None:
    conn.close()


def joining(port: int) -> tuple[BaseException, float]:
    """What init_process_group at 127.0.0.1:``port`` raises, and after how many seconds."""
    started = time.monotonic()
    with pytest.raises(AsyncollError) as info:
        asyncoll.init_process_group(init_method=f"tcp://127.0.0.1:{port}", world_size=2,
                                    rank=1, timeout=30)
    return info.value, time.monotonic() - started


@pytest.mark.parametrize("answer, error, words", [
    (say_nothing, ProtocolError, "did not greet this peer within"),
    # A banner, as an SSH server sends first: its first four bytes read as a huge length.
    (send(b"SSH-2.0-OpenSSH_9.6\r\n"), ProtocolError, "is not an asyncoll coordinator"),
    # A length that fits, then bytes that are no msgpack at all.
    (send(b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1"), ProtocolError,
     "is not an asyncoll coordinator"),
    # A length that fits, then part of the body, then silence.
    (send(b"\x00\x00\x00\x20\x81"), ProtocolError, "did not greet this peer within"),
    (close_at_once, RendezvousError, "closed the connection before greeting"),
], ids=["silent", "banner", "garbage", "half_a_message", "closes"])
def test_a_server_that_is_not_a_coordinator_is_named_at_once(answer, error, words):
    with server_that(answer) as port:
        raised, seconds = joining(port)

    assert isinstance(raised, error), repr(raised)
    assert f"127.0.0.1:{port}" in str(raised) and words in str(raised), str(raised)
    assert seconds < FAILS_WITHIN_S, f"found out after {seconds:.1f} s: {raised}"


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass


def test_an_http_server_is_named_at_once():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        raised, seconds = joining(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

    assert isinstance(raised, ProtocolError), repr(raised)
    assert f"127.0.0.1:{server.server_address[1]}" in str(raised)
    assert "point init_method" in str(raised)
    assert seconds < FAILS_WITHIN_S, f"found out after {seconds:.1f} s: {raised}"


def test_torchs_tcp_store_is_named_at_once():
    distributed = pytest.importorskip("torch.distributed")
    from datetime import timedelta

    store = distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                 timeout=timedelta(seconds=10))

    raised, seconds = joining(store.port)

    assert isinstance(raised, ProtocolError), repr(raised)
    assert f"127.0.0.1:{store.port}" in str(raised) and "TCPStore" in str(raised)
    assert seconds < FAILS_WITHIN_S, f"found out after {seconds:.1f} s: {raised}"
