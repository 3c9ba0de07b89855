"""A coordinator's greeting, told apart from what a server that is not one says.

A coordinator speaks first: it greets a peer as soon as it accepts it. A
server that says nothing for GREETING_TIMEOUT_S (torch's TCPStore, an HTTP
server: they wait for their client) is not one, and one whose first bytes
are not a message is not one either. But a coordinator that requires TLS
says nothing to a peer without TLS until it has waited for a TLS hello: so
a silent server is nudged once with a byte of plain text, which such a
coordinator answers at once with its refusal, and anything else does not.
"""

from __future__ import annotations

import asyncio
import contextlib

from asyncoll._compat import timeout as timeout_after
from asyncoll._rendezvous.control import read_message
from asyncoll._wire.messages import Error, Message
from asyncoll.errors import ProtocolError

#: What a peer without TLS sends a silent server: plain text, no TLS record (an HTTP
#: server takes it for an empty request line and closes).
NUDGE = b"\n"

_WHAT_TO_DO = ("point init_method (or MASTER_ADDR and MASTER_PORT, or ASYNCOLL_COORDINATOR) "
               "at an asyncoll coordinator, or launch with asyncoll-run or torchrun")


async def read_greeting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        address: str, bound: float, nudge: bool) -> tuple[int, Message] | None:
    """The first message from ``address`` (None: it closed without a word), within
    ``bound`` seconds; with ``nudge``, a silent server is nudged and given half as long
    again, for a TLS coordinator's refusal.

    Raises:
        ProtocolError: nothing in time, or bytes that are not a message: ``address`` is
            not an asyncoll coordinator.
    """
    try:
        return await _first_message(reader, address, bound)
    except _Silent:
        pass
    if nudge:
        writer.write(NUDGE)
        with contextlib.suppress(_Silent):
            answer = await _first_message(reader, address, bound / 2)
            if answer is not None and isinstance(answer[1], Error):
                return answer
    tls = (", or an asyncoll coordinator that requires TLS, which this process lacks "
           "(set ASYNCOLL_TLS_CERT and ASYNCOLL_TLS_KEY)") if nudge else ""
    raise ProtocolError(f"{address} accepted the connection but did not greet this peer "
                        f"within {bound:g} s, where an asyncoll coordinator greets at once: "
                        f"it is not one (torch's TCPStore or an HTTP server, say){tls}; "
                        f"{_WHAT_TO_DO}")


class _Silent(Exception):
    """Nothing came within the bound."""


async def _first_message(reader: asyncio.StreamReader, address: str,
                         bound: float) -> tuple[int, Message] | None:
    """The next message (None: the end of the stream).

    Raises:
        _Silent: nothing within ``bound`` seconds.
        ProtocolError: bytes that are not a message.
    """
    try:
        async with timeout_after(bound) as deadline:
            return await read_message(reader)
    except TimeoutError:
        if not deadline.expired():
            raise
        raise _Silent from None
    except (ProtocolError, asyncio.IncompleteReadError) as exc:
        raise ProtocolError(f"{address} is not an asyncoll coordinator: what it sent first is "
                            f"not an asyncoll greeting ({exc}); {_WHAT_TO_DO}") from exc
