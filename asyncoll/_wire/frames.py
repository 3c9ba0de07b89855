"""The fixed binary header that precedes every data-plane payload.

A data frame is this header followed by ``nbytes`` of raw payload, which the
receiver writes straight into the destination array. Frames are matched to
receives by (group, seq, step) plus the connection they arrive on, so no
negotiation is needed and several operations can be in flight at once.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from asyncoll._settings import PROTOCOL_VERSION
from asyncoll.errors import ProtocolError

MAGIC = b"AC"
# magic, version, kind, flags, group, step, seq, nbytes: 32 bytes, little endian.
_HEADER = struct.Struct("<2sBBIIIQQ")
HEADER_SIZE = _HEADER.size
MAX_FRAME_BYTES = 1 << 40
#: Largest payload of a HELLO or ABORT frame.
MAX_CONTROL_PAYLOAD = 4096


class FrameKind(enum.IntEnum):
    """What a frame is for."""

    DATA = 1
    #: Dialer -> acceptor: payload is the job id; ``step`` is the dialer's rank.
    HELLO = 2
    #: Acceptor -> dialer: the connection is accepted; no payload.
    HELLO_ACK = 3
    #: The sender gave up on operation ``seq`` of ``group``; payload is
    #: ``b"<error code>:<message>"`` (UTF-8). The receiver fails the group.
    ABORT = 4


def encode_abort(code: str, message: str) -> bytes:
    """The payload of an ABORT frame."""
    return f"{code}:{message}".encode()[:MAX_CONTROL_PAYLOAD]


def decode_abort(payload: bytes) -> tuple[str, str]:
    """(error code, message) from an ABORT frame's payload."""
    code, _, message = payload.decode(errors="replace").partition(":")
    return code, message


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """One decoded data-frame header."""

    kind: FrameKind
    group: int
    seq: int
    step: int
    nbytes: int
    flags: int = 0

    def pack(self) -> bytes:
        """Encode the header as HEADER_SIZE bytes."""
        return _HEADER.pack(MAGIC, PROTOCOL_VERSION, self.kind, self.flags,
                            self.group, self.step, self.seq, self.nbytes)


def pack_header(kind: FrameKind, group: int, seq: int, step: int, nbytes: int) -> bytes:
    """Encode a header without building a FrameHeader (the send hot path)."""
    return _HEADER.pack(MAGIC, PROTOCOL_VERSION, kind, 0, group, step, seq, nbytes)


def unpack_header(data: bytes | bytearray | memoryview) -> FrameHeader:
    """Decode and validate HEADER_SIZE bytes.

    Raises:
        ProtocolError: bad magic, another protocol version, an unknown kind or
            an impossible payload size.
    """
    if len(data) != HEADER_SIZE:
        raise ProtocolError(f"a frame header is {HEADER_SIZE} bytes, got {len(data)}")
    magic, version, kind, flags, group, step, seq, nbytes = _HEADER.unpack(data)
    if magic != MAGIC:
        raise ProtocolError(f"data frame starts with {bytes(magic)!r}, not {MAGIC!r}: "
                            "the peer is not an asyncoll peer")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"data frame has protocol version {version}, this peer speaks "
                            f"{PROTOCOL_VERSION}: run the same asyncoll version everywhere")
    try:
        frame_kind = FrameKind(kind)
    except ValueError:
        raise ProtocolError(f"data frame has unknown kind {kind}") from None
    if nbytes > MAX_FRAME_BYTES:
        raise ProtocolError(f"data frame announces {nbytes} bytes, over the limit of "
                            f"{MAX_FRAME_BYTES}")
    return FrameHeader(frame_kind, group, seq, step, nbytes, flags)
