"""Frames fed to a connection byte by byte reach the right receives.

The connection is driven directly through the BufferedProtocol calls the
event loop makes (get_buffer, buffer_updated), so every interleaving of
"bytes arrive" and "receive is posted" can be tested deterministically.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from asyncoll._transport.tcp.connection import PeerConnection
from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll._wire.frames import HEADER_SIZE, NO_FINGERPRINT, FrameKind, pack_header
from asyncoll.errors import MismatchError, PeerLostError, ProtocolError

pytestmark = pytest.mark.timeout(30)

TAG = (0, 1, 0)


def frame(tag: tuple[int, int, int], payload: np.ndarray) -> bytes:
    data = payload.tobytes()
    return pack_header(FrameKind.DATA, *tag, len(data)) + data


def feed(connection: PeerConnection, data: bytes, piece: int = 1 << 20) -> None:
    """Deliver ``data`` as the event loop would, at most ``piece`` bytes per read."""
    while data:
        buffer = connection.get_buffer(-1)
        n = min(len(buffer), len(data), piece)
        buffer[:n] = data[:n]
        connection.buffer_updated(n)
        data = data[n:]


@pytest.fixture
async def setup():
    # This process is rank 1; rank 0 dialed it (lower ranks dial), so nothing
    # here opens a socket.
    mesh = TcpMesh("job")
    mesh.set_directory(1, {0: ("127.0.0.1", 1, "a"), 1: ("127.0.0.1", 2, "b")})
    connection = PeerConnection(mesh, None)
    mesh.accept_hello(connection, 0)  # as if rank 0 had dialed and proved the job
    connection.peer = 0
    connection.ready.set_result(None)
    yield mesh, connection
    await mesh.close()


def as_bytes(array: np.ndarray) -> memoryview:
    return memoryview(array.view(np.uint8))


@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
async def test_receive_posted_before_the_frame_is_filled_in_place(setup, piece):
    mesh, connection = setup
    out = np.zeros(1000, dtype=np.int64)
    received = mesh.recv_into(0, TAG, as_bytes(out))
    feed(connection, frame(TAG, np.arange(1000, dtype=np.int64)), piece)
    await asyncio.wait_for(received, 1)
    np.testing.assert_array_equal(out, np.arange(1000))


async def test_frame_that_arrives_before_its_receive_is_kept_until_posted(setup):
    mesh, connection = setup
    feed(connection, frame(TAG, np.arange(10, dtype=np.float32)))
    out = np.zeros(10, dtype=np.float32)
    await asyncio.wait_for(mesh.recv_into(0, TAG, as_bytes(out)), 1)
    np.testing.assert_array_equal(out, np.arange(10))


@pytest.mark.parametrize("split", [HEADER_SIZE, HEADER_SIZE + 1, HEADER_SIZE + 4000])
async def test_receive_posted_while_its_payload_is_arriving_gets_the_payload(setup, split):
    mesh, connection = setup
    data = frame(TAG, np.arange(1000, dtype=np.int64))
    feed(connection, data[:split])
    out = np.zeros(1000, dtype=np.int64)
    received = mesh.recv_into(0, TAG, as_bytes(out))
    feed(connection, data[split:])
    await asyncio.wait_for(received, 1)
    np.testing.assert_array_equal(out, np.arange(1000))


@pytest.mark.parametrize("piece", [1, 3, 1 << 20])
async def test_frames_of_several_operations_reach_their_own_receives(setup, piece):
    mesh, connection = setup
    tags = [(0, seq, step) for seq in (1, 2) for step in (0, 1)]
    outs = {tag: np.zeros(5, dtype=np.int32) for tag in tags}
    early = {tag: mesh.recv_into(0, tag, as_bytes(outs[tag])) for tag in tags[::2]}
    feed(connection, b"".join(frame(t, np.full(5, t[1] * 10 + t[2], np.int32))
                              for t in reversed(tags)), piece)
    late = {tag: mesh.recv_into(0, tag, as_bytes(outs[tag])) for tag in tags[1::2]}
    await asyncio.wait_for(asyncio.gather(*early.values(), *late.values()), 1)
    for tag, out in outs.items():
        np.testing.assert_array_equal(out, np.full(5, tag[1] * 10 + tag[2]))


async def test_frame_of_another_size_fails_its_receive_with_mismatch(setup):
    mesh, connection = setup
    out = np.zeros(4, dtype=np.float64)
    received = mesh.recv_into(0, TAG, as_bytes(out))
    feed(connection, frame(TAG, np.ones(3, dtype=np.float64)))
    with pytest.raises(MismatchError, match="rank 0 sent 24 bytes .* expected 32"):
        await asyncio.wait_for(received, 1)
    assert not out.any(), "a mismatched payload must not be written"


async def test_same_frame_twice_is_a_protocol_error(setup):
    mesh, connection = setup
    with pytest.raises(ProtocolError, match="twice"):
        mesh.inbox(0).arrived(TAG, bytearray(4), NO_FINGERPRINT)
        mesh.inbox(0).arrived(TAG, bytearray(4), NO_FINGERPRINT)


@pytest.mark.parametrize("posted_first", [True, False])
async def test_payload_larger_than_the_stage_is_completed_straight_into_its_target(
        setup, posted_first):
    mesh, connection = setup
    values = np.arange(100_000, dtype=np.float64)  # 800 KB, past the 64 KiB stage
    out = np.zeros_like(values)
    data = frame(TAG, values) + frame((0, 2, 0), values[:3])
    received = mesh.recv_into(0, TAG, as_bytes(out)) if posted_first else None
    feed(connection, data)
    if received is None:
        received = mesh.recv_into(0, TAG, as_bytes(out))
    small = np.zeros(3, dtype=np.float64)
    await asyncio.wait_for(asyncio.gather(received, mesh.recv_into(0, (0, 2, 0),
                                                                   as_bytes(small))), 1)
    np.testing.assert_array_equal(out, values)
    np.testing.assert_array_equal(small, values[:3])


async def test_receive_cancelled_mid_payload_stops_writing_into_its_array(setup):
    mesh, connection = setup
    out = np.zeros(100_000, dtype=np.uint8)
    received = mesh.recv_into(0, TAG, as_bytes(out))
    data = (frame(TAG, np.full(100_000, 7, dtype=np.uint8))
            + frame((0, 2, 0), np.ones(2, dtype=np.uint8)))
    feed(connection, data[:70_000])
    received.cancel()
    feed(connection, data[70_000:])
    assert (out[70_000 - HEADER_SIZE:] == 0).all(), "bytes after the cancel reached the array"
    after = np.zeros(2, dtype=np.uint8)
    await asyncio.wait_for(mesh.recv_into(0, (0, 2, 0), as_bytes(after)), 1)
    assert after.tolist() == [1, 1]


async def test_receive_whose_payload_is_arriving_fails_when_the_connection_drops(setup):
    mesh, connection = setup
    out = np.zeros(100_000, dtype=np.uint8)
    received = mesh.recv_into(0, TAG, as_bytes(out))
    feed(connection, frame(TAG, np.ones(100_000, dtype=np.uint8))[:50_000])

    connection.connection_lost(ConnectionResetError("reset by peer"))

    with pytest.raises(PeerLostError):
        await asyncio.wait_for(received, 1)


async def test_receive_whose_payload_is_arriving_fails_when_its_channel_fails(setup):
    mesh, connection = setup
    out = np.zeros(100_000, dtype=np.uint8)
    received = mesh.recv_into(0, TAG, as_bytes(out))
    data = frame(TAG, np.ones(100_000, dtype=np.uint8))
    feed(connection, data[:50_000])

    mesh.fail_channel(TAG[0], MismatchError("broken elsewhere"))
    feed(connection, data[50_000:])  # the rest is thrown away

    with pytest.raises(MismatchError, match="broken elsewhere"):
        await asyncio.wait_for(received, 1)
    assert not out[50_000 - HEADER_SIZE:].any(), "bytes after the failure reached the array"


async def test_error_for_a_peer_without_a_recorded_failure_names_rank_0_too(setup):
    mesh, _ = setup
    error = mesh.error_for(0)

    assert isinstance(error, PeerLostError)
    assert error.rank == 0 and "rank 0 on host a" in str(error)


@pytest.mark.parametrize("posted_first", [True, False])
async def test_a_consumer_gets_the_whole_payload_whether_it_came_before_or_after(
        setup, posted_first):
    mesh, connection = setup
    parts = []
    staging = np.zeros(100, dtype=np.int16)

    def consume(offset, data):
        parts.append((offset, bytes(data)))

    payload = np.arange(100, dtype=np.int16)
    if posted_first:
        received = mesh.recv_into(0, TAG, as_bytes(staging), consume=consume)
        feed(connection, frame(TAG, payload), 7)
    else:
        feed(connection, frame(TAG, payload), 7)
        received = mesh.recv_into(0, TAG, as_bytes(staging), consume=consume)
    await asyncio.wait_for(received, 1)
    assert parts == [(0, payload.tobytes())]


async def test_a_consumer_that_raises_fails_its_receive_and_the_connection_goes_on(setup):
    mesh, connection = setup

    def consume(offset, data):
        raise FloatingPointError("overflow encountered in add")

    received = mesh.recv_into(0, TAG, as_bytes(np.zeros(4, np.float32)), consume=consume)
    feed(connection, frame(TAG, np.ones(4, np.float32)))
    with pytest.raises(FloatingPointError):
        await asyncio.wait_for(received, 1)
    out = np.zeros(4, np.float32)
    later = mesh.recv_into(0, (0, 2, 0), as_bytes(out))
    feed(connection, frame((0, 2, 0), np.full(4, 7, np.float32)))
    await asyncio.wait_for(later, 1)
    assert (out == 7).all()


class _SilentTransport:
    """A transport whose peer stopped acknowledging: everything written stays queued."""

    def __init__(self) -> None:
        self.written = 0
        self.closed = False

    def write(self, data) -> None:
        self.written += len(data)

    def writelines(self, items) -> None:
        for item in items:
            self.write(item)

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    abort = close


async def test_a_send_waiting_on_a_peer_declared_lost_fails_at_once(setup):
    # A host cut off sends no reset: its sends never drain. The coordinator's
    # notice (the peer's failure) must fail them, not the operation's deadline.
    mesh, connection = setup
    connection.transport = _SilentTransport()
    connection.pause_writing()
    sent = connection.send_frame(FrameKind.DATA, TAG, memoryview(bytes(1 << 20)))
    mesh.fail_peer(0, PeerLostError("rank 0 on host h0 was lost: no heartbeat", rank=0))
    with pytest.raises(PeerLostError, match="no heartbeat"):
        await asyncio.wait_for(sent, 1)


async def test_the_mesh_knows_whether_any_frame_waits_for_its_receive(setup):
    mesh, connection = setup
    assert not mesh.has_early
    feed(connection, frame(TAG, np.arange(3, dtype=np.int32)))
    feed(connection, frame((5, 1, 0), np.arange(2, dtype=np.int32)))
    assert mesh.has_early and mesh.early(5) == [(0, (5, 1, 0), NO_FINGERPRINT)]
    await asyncio.wait_for(mesh.recv_into(0, TAG, as_bytes(np.zeros(3, np.int32))), 1)
    assert mesh.has_early  # channel 5's frame is still kept
    mesh.fail_channel(5, MismatchError("broken elsewhere"))
    assert not mesh.has_early and mesh.inbox(0).kept_bytes == 0


class OpenTransport:
    """A connection's transport to a peer that never closes its end (it is frozen)."""

    def __init__(self) -> None:
        self.eof_written = self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof_written = True

    def write(self, data: bytes) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


async def test_closing_does_not_linger_for_a_peer_declared_lost(setup, monkeypatch):
    # A frozen peer keeps its end open: lingering for it would delay an elastic
    # job's survivors by the linger time at every reconfigure.
    mesh, connection = setup
    transport = OpenTransport()
    connection.transport = transport
    monkeypatch.setattr("asyncoll._transport.tcp.mesh.LINGER_S", 60.0)
    mesh.fail_peer(0, PeerLostError("rank 0 was lost", rank=0, host="a"))
    await asyncio.wait_for(mesh.close(), 10)
    assert transport.closed and not transport.eof_written
