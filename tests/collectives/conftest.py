"""Every test here runs on every data path: TCP, shared memory, the arena, the hierarchy.

In the TCP run, operations of 64 KiB and less run over each group's own
direct links (the fast path of groups without an arena, see
asyncoll._group.links_path), larger ones over the mesh's connections.
In the shared-memory run every payload of at least one byte goes through a
ring of 8 KiB, so larger payloads travel as many pieces, wrap around the ring
and wait for the receiver to free it, as payloads over the ring size do in
real use; groups get no arena there. In the arena run (same-host groups'
shared-memory arenas, see asyncoll._group.arena_path) slots are cut to
64 KiB, so the small and medium arrays of a test take the arena and the
larger ones (and point-to-point messages) the transport, over the same small
rings as in the shared-memory run, in the same group, in turn. In the
hierarchy run the ranks pretend to run on two hosts (the first half on one),
so groups with several members on a host and members on both run their
small collectives through each host's arena and one member per host
(asyncoll._group.hierarchy), and the others over direct links.
"""

from __future__ import annotations

import pytest

from asyncoll import testing
from asyncoll._transport.shm import arena
from asyncoll._transport.shm import segment as shm


#: Each member's arena slot in the arena run.
ARENA_SLOT_BYTES = 64 << 10


@pytest.fixture(autouse=True, params=["tcp", "shm", "arena", "hierarchy"])
def transport(request, monkeypatch):
    if request.param == "tcp":
        monkeypatch.setenv("ASYNCOLL_SHM", "0")
    else:
        if shm._posixshmem is None:
            pytest.skip("no POSIX shared memory on this platform")
        monkeypatch.setenv("ASYNCOLL_SHM", "1")
        monkeypatch.setenv("ASYNCOLL_SHM_MIN_BYTES", "1")
        monkeypatch.setenv("ASYNCOLL_SHM_BYTES", "8192")
        if request.param == "shm":
            monkeypatch.setenv("ASYNCOLL_ARENA_BYTES", "0")
            monkeypatch.setenv("ASYNCOLL_LINKS_BYTES", "0")
        elif not arena.supported():
            pytest.skip("no arena on this platform (POSIX shared memory on x86-64 only)")
        elif request.param == "hierarchy":
            monkeypatch.setattr(testing, "PRETEND_HOSTS", 2)
            monkeypatch.setenv("ASYNCOLL_ARENA_BYTES", str(ARENA_SLOT_BYTES))
            monkeypatch.setenv("ASYNCOLL_LINKS_BYTES", str(ARENA_SLOT_BYTES))
        else:
            monkeypatch.setenv("ASYNCOLL_ARENA_BYTES", str(ARENA_SLOT_BYTES))
            monkeypatch.setenv("ASYNCOLL_LINKS_BYTES", "0")
    return request.param
