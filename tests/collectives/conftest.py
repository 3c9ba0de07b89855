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

The collective matrix (the modules in IPV6_MODULES) has a fifth run, "tcp6":
the TCP run with the coordinator on ::1, so that every rank joins
tcp://[::1]:port, advertises ::1 and opens its data connections and direct
links over IPv6.
"""

from __future__ import annotations

import pytest

from asyncoll import testing
from asyncoll._transport.shm import arena
from asyncoll._transport.shm import segment as shm


#: Each member's arena slot in the arena run.
ARENA_SLOT_BYTES = 64 << 10
#: Every module's runs.
RUNS = ["tcp", "shm", "arena", "hierarchy"]
#: The modules of the collective matrix, which run over IPv6 loopback too.
IPV6_MODULES = {"test_collective_set", "test_all_reduce_matrix"}


def pytest_generate_tests(metafunc):
    # A test that parametrizes transport itself picks its own runs.
    chosen = any("transport" in str(mark.args[0]) for mark in
                 metafunc.definition.iter_markers("parametrize"))
    if "transport" in metafunc.fixturenames and not chosen:
        module = metafunc.module.__name__.rpartition(".")[2]
        runs = RUNS + ["tcp6"] if module in IPV6_MODULES else RUNS
        metafunc.parametrize("transport", runs, indirect=True)


@pytest.fixture(autouse=True)
def transport(request, monkeypatch):
    if request.param == "tcp6":
        if not testing.has_ipv6_loopback():
            pytest.skip("this host has no IPv6 loopback (::1)")
        monkeypatch.setenv("ASYNCOLL_SHM", "0")
        monkeypatch.setattr(testing, "LOOPBACK", "::1")
    elif request.param == "tcp":
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
