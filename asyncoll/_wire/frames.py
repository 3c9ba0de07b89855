"""The fixed binary header that precedes every data-plane payload.

A data frame is this header followed by ``nbytes`` of raw payload, which the
receiver writes straight into the destination array. Frames are matched to
receives by (channel, seq, step) plus the connection they arrive on, so no
negotiation is needed and several operations can be in flight at once.
"""

from __future__ import annotations

import enum
import functools
import struct
from dataclasses import dataclass
from typing import NamedTuple

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._wire.dtypes import dtype_from_code
from asyncoll.errors import ConfigurationError, ProtocolError
from asyncoll.types import ReduceOp

MAGIC = b"AC"
# magic, version, kind, flags, channel, step, seq, nbytes, then the operation's
# fingerprint (operation, dtype, reduce op, algorithm, root, elements): 48 bytes,
# little endian.
_HEADER = struct.Struct("<2sBBIIIQQBBBBiQ")
HEADER_SIZE = _HEADER.size
#: The header's struct, for a reader that cuts frames from its own buffer
#: (a group's direct links): fields as _HEADER's, checked with :func:`check_fields`.
HEADER_FIELDS = _HEADER
#: Packs a header from (kind, flags, channel, step, seq, nbytes, *fingerprint), the
#: magic and version bound: pack_header without a Python call's cost, for hot paths.
pack_fields = functools.partial(_HEADER.pack, MAGIC, PROTOCOL_VERSION)
MAX_FRAME_BYTES = 1 << 40
#: Largest payload of a HELLO or ABORT frame.
MAX_CONTROL_PAYLOAD = 4096


class FrameKind(enum.IntEnum):
    """What a frame is for."""

    DATA = 1
    #: Dialer -> acceptor: payload is ``job id\nanswer to the challenge``;
    #: ``step`` is the dialer's rank.
    HELLO = 2
    #: Acceptor -> dialer: the connection is accepted; no payload.
    HELLO_ACK = 3
    #: The sender gave up on operation ``seq`` of ``channel``; payload is
    #: ``b"<error code>:<lost rank>:<message>"`` (UTF-8). The receiver fails the group.
    ABORT = 4
    #: The sender is leaving the job (destroy_process_group); the connection
    #: closes after it. No payload.
    GOODBYE = 5
    #: Acceptor -> dialer, first: payload is a nonce; the dialer's HELLO answers
    #: it (``job\nHMAC``) when the job has a shared secret.
    CHALLENGE = 6
    #: Sender -> receiver on the same host: payload is ``name\ncapacity`` of a
    #: shared-memory ring the sender made for its payloads to this peer.
    SHM_OPEN = 7
    #: Receiver -> sender: payload ``b"ok"`` once the ring is mapped (and
    #: unlinked), else the reason it could not be, and the sender keeps to TCP.
    SHM_OPENED = 8
    #: A piece of a DATA payload lies in the sender's ring; payload is a
    #: SHM_PIECE descriptor; channel, seq, step and fingerprint are the payload's.
    SHM_DATA = 9
    #: Receiver -> sender: the ring is free up to the position in the payload.
    SHM_FREE = 10
    #: Are you there? (a keepalive, asyncoll._transport.tcp.keepalive); no payload.
    PING = 11
    #: Here: the answer to a PING, or sent unasked by a rank that stopped reading
    #: the peer's frames for a while (its inbox is full); no payload.
    PONG = 12


class Operation(enum.IntEnum):
    """Which collective a frame belongs to, as its fingerprint says."""

    NONE = 0
    ALL_REDUCE = 1
    BROADCAST = 2
    REDUCE = 3
    ALL_GATHER = 4
    REDUCE_SCATTER = 5
    GATHER = 6
    SCATTER = 7
    ALL_TO_ALL = 8
    BARRIER = 9
    ALL_GATHER_OBJECT = 10
    BROADCAST_OBJECT_LIST = 11
    GATHER_OBJECT = 12
    SCATTER_OBJECT_LIST = 13
    SEND = 14


class Fingerprint(NamedTuple):
    """What an operation is, carried by every frame of it.

    Ranks whose fingerprints for the same (group, seq) differ called different
    collectives, or the same one with different arguments: they are out of
    step, and the receiver raises MismatchError instead of using the data.
    ``dtype`` is the wire code, ``op`` the ReduceOp value + 1 (0: none),
    ``algorithm`` the index + 1 of the algorithm chosen (0: the only one),
    ``root`` the group index of src/dst (-1: none), ``elements`` the elements
    the operation moves in total (0 where ranks legitimately differ).
    """

    operation: int
    dtype: int = 0
    op: int = 0
    algorithm: int = 0
    root: int = -1
    elements: int = 0

    def differences(self, theirs: Fingerprint, me: int, them: int) -> list[str]:
        """The fields that differ, as "field: value on rank me, value on rank them"."""
        mine_named, theirs_named = self.fields(), theirs.fields()
        return [f"{field}: {mine_named[field]} on rank {me}, {theirs_named[field]} on rank "
                f"{them}" for field in mine_named if mine_named[field] != theirs_named[field]]

    def fields(self) -> dict[str, object]:
        """Each field by name, readable."""
        try:
            operation: object = Operation(self.operation).name.lower()
        except ValueError:
            operation = self.operation
        try:
            dtype: object = dtype_from_code(self.dtype) if self.dtype else "none"
        except ConfigurationError:
            dtype = self.dtype
        try:
            op: object = ReduceOp(self.op - 1).name if self.op else "none"
        except ValueError:
            op = self.op
        return {"operation": operation, "dtype": dtype, "reduce op": op,
                "algorithm": self.algorithm, "root": self.root,
                "element count": self.elements}


#: The fingerprint of frames outside any operation (handshakes, aborts).
NO_FINGERPRINT = Fingerprint(Operation.NONE)


def encode_abort(code: str, message: str, lost: int = -1) -> bytes:
    """The payload of an ABORT frame; ``lost`` is the rank a PeerLostError names."""
    return f"{code}:{lost}:{message}".encode()[:MAX_CONTROL_PAYLOAD]


def decode_abort(payload: bytes) -> tuple[str, int, str]:
    """(error code, lost rank, message) from an ABORT frame's payload."""
    code, _, rest = payload.decode(errors="replace").partition(":")
    lost, _, message = rest.partition(":")
    try:
        rank = int(lost)
    except ValueError:
        rank, message = -1, rest
    return code, rank, message


#: A SHM_DATA descriptor: the payload's total size, this piece's offset in
#: it, the piece's place in the ring, its size, and the ring position after it.
SHM_PIECE = struct.Struct("<QQQQQ")
#: A SHM_FREE payload: the ring position up to which the receiver is done.
SHM_FREED = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """One decoded data-frame header."""

    kind: FrameKind
    #: The tag's first field: the stream of operations the frame belongs to.
    channel: int
    seq: int
    step: int
    nbytes: int
    flags: int = 0
    fingerprint: Fingerprint = NO_FINGERPRINT

    def pack(self) -> bytes:
        """Encode the header as HEADER_SIZE bytes."""
        return _HEADER.pack(MAGIC, PROTOCOL_VERSION, self.kind, self.flags,
                            self.channel, self.step, self.seq, self.nbytes, *self.fingerprint)


_KINDS = {kind.value: kind for kind in FrameKind}


def pack_header(kind: int, channel: int, seq: int, step: int, nbytes: int,
                fingerprint: Fingerprint = NO_FINGERPRINT) -> bytes:
    """Encode a header without building a FrameHeader (the send hot path)."""
    return _HEADER.pack(MAGIC, PROTOCOL_VERSION, kind, 0, channel, step, seq, nbytes,
                        *fingerprint)


def check_fields(fields: tuple[object, ...]) -> None:
    """Refuse a header unpacked with HEADER_FIELDS that is not this protocol's.

    Raises:
        ProtocolError: bad magic or another protocol version.
    """
    if fields[0] != MAGIC:
        raise ProtocolError(f"a frame starts with {fields[0]!r}, not {MAGIC!r}: the peer is "
                            "not an asyncoll peer")
    if fields[1] != PROTOCOL_VERSION:
        raise ProtocolError(f"a frame has protocol version {fields[1]}, this peer speaks "
                            f"{PROTOCOL_VERSION}: run the same asyncoll version everywhere")


def unpack_header(data: bytes | bytearray | memoryview) -> FrameHeader:
    """Decode and validate HEADER_SIZE bytes.

    Raises:
        ProtocolError: bad magic, another protocol version, an unknown kind or
            an impossible payload size.
    """
    if len(data) != HEADER_SIZE:
        raise ProtocolError(f"a frame header is {HEADER_SIZE} bytes, got {len(data)}")
    fields = _HEADER.unpack(data)
    magic, version, kind, flags, channel, step, seq, nbytes = fields[:8]
    if magic != MAGIC:
        raise ProtocolError(f"data frame starts with {bytes(magic)!r}, not {MAGIC!r}: "
                            "the peer is not an asyncoll peer")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"data frame has protocol version {version}, this peer speaks "
                            f"{PROTOCOL_VERSION}: run the same asyncoll version everywhere")
    frame_kind = _KINDS.get(kind)
    if frame_kind is None:
        raise ProtocolError(f"data frame has unknown kind {kind}")
    if nbytes > MAX_FRAME_BYTES:
        raise ProtocolError(f"data frame announces {nbytes} bytes, over the limit of "
                            f"{MAX_FRAME_BYTES}")
    # tuple.__new__ skips NamedTuple's argument parsing: this runs for every frame.
    fingerprint: Fingerprint = tuple.__new__(Fingerprint, fields[8:])
    return FrameHeader(frame_kind, channel, seq, step, nbytes, flags, fingerprint)
