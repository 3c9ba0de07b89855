"""A coordinator's greeting, told apart from what a server that is not one says.

A coordinator speaks first: it greets a peer as soon as it accepts it. A
server that says nothing for GREETING_TIMEOUT_S of this process's waking time
(torch's TCPStore, an HTTP server: they wait for their client) is not one,
and one whose first bytes are not a message is not one either. But a coordinator that requires TLS
says nothing to a peer without TLS until it has waited for a TLS hello: so
a silent server is nudged once with a byte of plain text, which such a
coordinator answers at once with its refusal, and anything else does not.
"""

from __future__ import annotations

import asyncio
import contextlib

from asyncoll._rendezvous.control import read_message
from asyncoll._wire.messages import Error, Message
from asyncoll.errors import ProtocolError

#: What a peer without TLS sends a silent server: plain text, no TLS record (an HTTP
#: server takes it for an empty request line and closes).
NUDGE = b"\n"

#: How often a silent wait looks at the clock. It counts only the time this process
#: was awake to hear: a process starved of the processor (on a busy machine, beside
#: its own coordinator's event loop, say) counts at most two looks' worth per look,
#: so a coordinator starved with it is not taken for a silent server.
LOOK_S = 0.05

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
        _Silent: nothing within ``bound`` seconds of this process's waking time.
        ProtocolError: bytes that are not a message.
    """
    loop = asyncio.get_running_loop()
    read = asyncio.ensure_future(read_message(reader))
    try:
        awake = 0.0
        while not read.done():
            began = loop.time()
            await asyncio.wait({read}, timeout=LOOK_S)
            awake += min(loop.time() - began, 2 * LOOK_S)
            if not read.done() and awake >= bound:
                raise _Silent
        return read.result()
    except (ProtocolError, asyncio.IncompleteReadError) as exc:
        raise ProtocolError(f"{address} is not an asyncoll coordinator: what it sent first is "
                            f"not an asyncoll greeting ({exc}); {_WHAT_TO_DO}") from exc
    finally:
        if not read.done():
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await read
