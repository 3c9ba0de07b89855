"""A data port that strangers reach: silence and garbage cost one connection only."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import asyncoll._transport.tcp.mesh as mesh_module
from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll._wire.frames import HEADER_SIZE, FrameKind, pack_header

pytestmark = pytest.mark.timeout(30)


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    """Whether the mesh closes the connection within 5 s (its challenge comes first)."""
    try:
        await asyncio.wait_for(reader.read(), 5)
    except ConnectionResetError:
        pass
    return reader.at_eof() or reader.exception() is not None


async def test_connection_that_sends_no_handshake_is_dropped(monkeypatch):
    monkeypatch.setattr(mesh_module, "HANDSHAKE_TIMEOUT_S", 0.2)
    mesh = TcpMesh("job")
    host, port = "127.0.0.1", await mesh.listen("127.0.0.1")
    reader, writer = await asyncio.open_connection(host, port)
    assert await closed_by_peer(reader)
    writer.close()
    await mesh.close()


@pytest.mark.parametrize("garbage", [
    b"\x00" * HEADER_SIZE,
    pack_header(FrameKind.DATA, 0, 1, 0, 4) + b"data",   # data before the handshake
    pack_header(FrameKind.HELLO, 0, 0, 0, 1 << 20),       # oversized handshake
    pack_header(FrameKind.HELLO, 0, 0, 0, 5) + b"other",  # another job's peer
])
async def test_garbage_closes_that_connection_and_the_mesh_keeps_working(garbage):
    server = TcpMesh("job")
    host, port = "127.0.0.1", await server.listen("127.0.0.1")
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(garbage)
    assert await closed_by_peer(reader)
    writer.close()

    # A real peer still gets through afterwards.
    client = TcpMesh("job")
    client_host, client_port = "127.0.0.1", await client.listen("127.0.0.1")
    directory = {0: (client_host, client_port, "a"), 1: (host, port, "b")}
    client.set_directory(0, directory)
    server.set_directory(1, directory)
    out = np.zeros(3, dtype=np.int32)
    received = server.recv_into(0, (0, 1, 0), memoryview(out.view(np.uint8)))
    await client.send(1, (0, 1, 0), memoryview(np.arange(3, dtype=np.int32).view(np.uint8)))
    await asyncio.wait_for(received, 5)
    assert out.tolist() == [0, 1, 2]
    await client.close()
    await server.close()
