"""Two real TcpMeshes of one job on loopback, ranks 0 and 1, each knowing the other."""

from __future__ import annotations

from asyncoll._transport.tcp.mesh import TcpMesh


async def loopback_pair() -> tuple[TcpMesh, TcpMesh]:
    """Meshes of ranks 0 and 1, listening on loopback, with the directory set (none
    dialled yet: rank 0 dials on its first send, as lower ranks do)."""
    zero, one = TcpMesh("job"), TcpMesh("job")
    directory = {0: ("127.0.0.1", await zero.listen("127.0.0.1"), "a"),
                 1: ("127.0.0.1", await one.listen("127.0.0.1"), "b")}
    zero.set_directory(0, directory)
    one.set_directory(1, directory)
    return zero, one
