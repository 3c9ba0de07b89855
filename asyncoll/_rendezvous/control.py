"""Reading and writing length-prefixed control messages on asyncio streams.

Shared by the peer's client and the coordinator daemon; the encoding itself
lives in asyncoll._wire.messages.
"""

from __future__ import annotations

import asyncio

from asyncoll._defaults import MAX_CONTROL_MESSAGE_BYTES
from asyncoll._tls.handshake import looks_like_tls, plaintext_peer_words
from asyncoll._wire.messages import LENGTH, Message, decode_body, encode
from asyncoll.errors import ProtocolError


async def read_message(reader: asyncio.StreamReader,
                       max_bytes: int = MAX_CONTROL_MESSAGE_BYTES) -> tuple[int, Message] | None:
    """Read one message; return None at a clean end of stream.

    The caller puts the deadline around this call: a peer that sends nothing
    is legitimate between requests.

    Raises:
        ProtocolError: the frame is over ``max_bytes`` or is not a valid message.
        asyncio.IncompleteReadError: the stream ended inside a frame.
    """
    try:
        prefix = await reader.readexactly(LENGTH.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise
    (size,) = LENGTH.unpack(prefix)
    if size > max_bytes and looks_like_tls(prefix):
        raise ProtocolError(plaintext_peer_words("the connection"))
    if size > max_bytes:
        raise ProtocolError(f"control message of {size} bytes is over the limit of "
                            f"{max_bytes} bytes")
    return decode_body(await reader.readexactly(size), max_bytes)


def write_message(writer: asyncio.StreamWriter, message: Message, request_id: int = 0) -> None:
    """Queue one message on ``writer`` (the caller drains when it must)."""
    writer.write(encode(message, request_id))
