"""A health probe of a coordinator that it does not take for a failure.

A bare TCP probe (docker's or Kubernetes' ``tcpSocket``) only shows that the
kernel accepts connections, which it does while the daemon's event loop is
stuck; and closing without reading the greeting resets the connection. This
probe reads the greeting, checks that it is a coordinator's, then closes
cleanly: the coordinator sees a connection that said nothing and left, and
logs nothing. ``asyncoll-coordinator --probe`` runs it.
"""

from __future__ import annotations

import socket
import time

from asyncoll._defaults import MAX_CONTROL_MESSAGE_BYTES
from asyncoll._wire.endpoint import join_host_port
from asyncoll._wire.messages import LENGTH, Challenge, decode_body
from asyncoll.errors import ProtocolError

#: How long the probe waits for the greeting, connecting included.
PROBE_TIMEOUT_S = 3.0


def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Greet the coordinator at ``host:port``; None if it answered as a coordinator.

    Returns:
        None when a coordinator greeted within ``timeout`` seconds; otherwise
        what went wrong, as a sentence naming the address.
    """
    where = join_host_port(host, port)
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return f"cannot reach a coordinator at {where}: {exc}"
    with sock:
        try:
            (size,) = LENGTH.unpack(_read_exactly(sock, LENGTH.size, deadline))
            if size > MAX_CONTROL_MESSAGE_BYTES:
                return f"{where} is not an asyncoll coordinator: its greeting is not one"
            _, greeting = decode_body(_read_exactly(sock, size, deadline),
                                      MAX_CONTROL_MESSAGE_BYTES)
            # Nothing is left unread, so closing sends a FIN, not a reset.
            sock.shutdown(socket.SHUT_RDWR)
        except TimeoutError:
            return (f"nothing at {where} greeted within {timeout} s (a coordinator greets "
                    "at once; a coordinator with TLS waits for the client's hello)")
        except EOFError:
            return f"{where} closed the connection without a greeting: not a coordinator"
        except ProtocolError as exc:
            return f"{where} is not an asyncoll coordinator: {exc}"
        except OSError as exc:
            return f"the connection to {where} broke before its greeting: {exc}"
    if not isinstance(greeting, Challenge):
        return (f"{where} is not an asyncoll coordinator: it greeted with a "
                f"{greeting.TYPE} message, where a coordinator sends a challenge")
    return None


def _read_exactly(sock: socket.socket, size: int, deadline: float) -> bytes:
    """``size`` bytes of ``sock`` by ``deadline`` (time.monotonic()).

    Raises:
        TimeoutError: not all of them came by the deadline.
        EOFError: the connection ended first.
    """
    data = bytearray()
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)
