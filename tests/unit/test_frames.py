"""The data-frame header: round trips and every way a header can be refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._wire.frames import (
    HEADER_SIZE,
    MAGIC,
    MAX_FRAME_BYTES,
    Fingerprint,
    FrameHeader,
    FrameKind,
    Operation,
    decode_abort,
    encode_abort,
    pack_header,
    unpack_header,
)
from asyncoll.errors import ProtocolError

pytestmark = pytest.mark.timeout(60)

U32 = st.integers(min_value=0, max_value=2**32 - 1)
U64 = st.integers(min_value=0, max_value=2**64 - 1)
NBYTES = st.integers(min_value=0, max_value=MAX_FRAME_BYTES)
KINDS = st.sampled_from(list(FrameKind))

# Byte offsets inside the header: magic (2), version (1), kind (1), flags (1), ...
VERSION_OFFSET = 2
KIND_OFFSET = 3


def _header_bytes(**changes: int) -> bytearray:
    data = bytearray(pack_header(FrameKind.DATA, channel=1, seq=2, step=3, nbytes=4))
    for offset, value in changes.items():
        data[{"version": VERSION_OFFSET, "kind": KIND_OFFSET}[offset]] = value
    return data


def test_header_is_48_bytes_and_starts_with_magic() -> None:
    data = pack_header(FrameKind.DATA, channel=0, seq=0, step=0, nbytes=0)

    assert HEADER_SIZE == 48
    assert len(data) == HEADER_SIZE
    assert data[:2] == MAGIC
    assert data[VERSION_OFFSET] == PROTOCOL_VERSION


FINGERPRINTS = st.builds(Fingerprint, st.sampled_from(list(Operation)),
                         st.integers(0, 255), st.integers(0, 255), st.integers(0, 255),
                         st.integers(-1, 2**31 - 1), U64)


@given(kind=KINDS, channel=U32, seq=U64, step=U32, nbytes=NBYTES,
       flags=st.integers(min_value=0, max_value=255), fingerprint=FINGERPRINTS)
def test_frame_header_round_trips_over_every_field_range(kind: FrameKind, channel: int, seq: int,
                                                          step: int, nbytes: int, flags: int,
                                                          fingerprint: Fingerprint) -> None:
    header = FrameHeader(kind, channel=channel, seq=seq, step=step, nbytes=nbytes, flags=flags,
                         fingerprint=fingerprint)

    data = header.pack()

    assert len(data) == HEADER_SIZE
    decoded = unpack_header(data)
    assert decoded == header
    assert isinstance(decoded.kind, FrameKind)


@given(kind=KINDS, channel=U32, seq=U64, step=U32, nbytes=NBYTES)
def test_pack_header_matches_frame_header_pack_with_no_flags(kind: FrameKind, channel: int,
                                                             seq: int, step: int,
                                                             nbytes: int) -> None:
    fast = pack_header(kind, channel, seq, step, nbytes)

    assert fast == FrameHeader(kind, channel, seq, step, nbytes).pack()
    assert unpack_header(fast) == FrameHeader(kind, channel, seq, step, nbytes, flags=0)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_unpack_header_accepts_bytes_bytearray_and_memoryview(wrap: type) -> None:
    data = pack_header(FrameKind.HELLO, channel=7, seq=8, step=9, nbytes=10)

    assert unpack_header(wrap(data)) == FrameHeader(FrameKind.HELLO, 7, 8, 9, 10)


@pytest.mark.parametrize("magic", [b"XX", b"ca", b"\x00\x00", b"GE"])
def test_unpack_header_refuses_bad_magic_naming_what_arrived(magic: bytes) -> None:
    data = magic + pack_header(FrameKind.DATA, 0, 0, 0, 0)[2:]

    with pytest.raises(ProtocolError, match="not an asyncoll peer") as info:
        unpack_header(data)

    assert repr(magic) in str(info.value)


@pytest.mark.parametrize("version", [0, PROTOCOL_VERSION + 1, 255])
def test_unpack_header_refuses_another_protocol_version(version: int) -> None:
    data = _header_bytes(version=version)

    with pytest.raises(ProtocolError, match="protocol version") as info:
        unpack_header(data)

    message = str(info.value)
    assert f"version {version}" in message
    assert str(PROTOCOL_VERSION) in message


@pytest.mark.parametrize("kind", [0, max(FrameKind) + 1, 255])
def test_unpack_header_refuses_unknown_kind(kind: int) -> None:
    data = _header_bytes(kind=kind)

    with pytest.raises(ProtocolError, match=f"unknown kind {kind}"):
        unpack_header(data)


def test_unpack_header_accepts_exactly_the_largest_payload() -> None:
    data = pack_header(FrameKind.DATA, 0, 0, 0, MAX_FRAME_BYTES)

    assert unpack_header(data).nbytes == MAX_FRAME_BYTES


@pytest.mark.parametrize("nbytes", [MAX_FRAME_BYTES + 1, 2**63, 2**64 - 1])
def test_unpack_header_refuses_oversize_payload_naming_size_and_limit(nbytes: int) -> None:
    data = pack_header(FrameKind.DATA, 0, 0, 0, nbytes)

    with pytest.raises(ProtocolError, match="over the limit") as info:
        unpack_header(data)

    assert str(nbytes) in str(info.value)
    assert str(MAX_FRAME_BYTES) in str(info.value)


@given(data=st.binary(min_size=HEADER_SIZE, max_size=HEADER_SIZE))
def test_unpack_header_on_arbitrary_bytes_returns_a_header_or_raises_protocol_error(
        data: bytes) -> None:
    try:
        header = unpack_header(data)
    except ProtocolError:
        return
    assert header.nbytes <= MAX_FRAME_BYTES
    assert header.pack() == data


@pytest.mark.parametrize("size", [0, 2, HEADER_SIZE - 1, HEADER_SIZE + 1])
def test_unpack_header_refuses_a_buffer_of_the_wrong_length_with_protocol_error(
        size: int) -> None:
    data = (pack_header(FrameKind.DATA, 0, 0, 0, 0) + b"\x00")[:size]

    with pytest.raises(ProtocolError):
        unpack_header(data)


def test_fingerprint_differences_name_each_differing_field() -> None:
    mine = Fingerprint(Operation.ALL_REDUCE, 5, 1, 1, -1, 10)
    theirs = Fingerprint(Operation.BROADCAST, 5, 0, 1, 2, 12)

    assert mine.differences(theirs, 0, 3) == [
        "operation: all_reduce on rank 0, broadcast on rank 3",
        "reduce op: SUM on rank 0, none on rank 3", "root: -1 on rank 0, 2 on rank 3",
        "element count: 10 on rank 0, 12 on rank 3"]
    assert mine.differences(mine, 0, 1) == []


def test_abort_payload_carries_code_lost_rank_and_message() -> None:
    assert decode_abort(encode_abort("peer_lost", "rank 3: gone", 3)) == (
        "peer_lost", 3, "rank 3: gone")
    assert decode_abort(b"odd") == ("odd", -1, "")
