"""The shared-memory transport: when it is used, how pieces travel, how it falls back.

The whole collective matrix also runs over shared memory (tests/collectives
runs every test on both transports); these tests cover what is particular to
it: the ring's bookkeeping, pieces that wrap and wait, payloads that arrive
before their receive, refusals, and that nothing is left in /dev/shm.
"""

from __future__ import annotations

import asyncio
import mmap
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncoll._runtime.settings import Settings
from asyncoll._transport.shm import segment as shm
from asyncoll.errors import ConfigurationError, MismatchError
from asyncoll.testing import run_ranks

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(shm._posixshmem is None, reason="no POSIX shared memory")]


def _segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith(shm.PREFIX)}


def _ours() -> set[str]:
    """This process's segments (the ranks of run_ranks are its tasks): other processes
    of the machine, such as CI's runs on other Pythons beside this one, make theirs."""
    return {name for name in _segments() if name.startswith(f"{shm.PREFIX}{os.getpid()}-")}


def _rings_in_use(world) -> int:
    peers = world.session.mesh._peers.values()
    return sum(1 for p in peers if p.connection is not None and p.connection.shm._outbox)


@pytest.fixture
def small_ring(monkeypatch):
    monkeypatch.setenv("ASYNCOLL_SHM", "1")
    monkeypatch.setenv("ASYNCOLL_SHM_MIN_BYTES", "1")
    monkeypatch.setenv("ASYNCOLL_SHM_BYTES", "4096")


# -- the ring's bookkeeping -------------------------------------------------------

def test_ring_space_skips_the_end_of_the_ring_rather_than_wrapping_a_piece():
    space = shm.RingSpace(100)
    assert space.reserve(60) == (0, 60)
    assert space.reserve(30) == (60, 90)
    assert space.reserve(20) is None  # 10 left at the end, 0 at the start
    space.free(60)
    assert space.reserve(20) == (0, 120)  # skipped 90..100 as padding
    assert space.reserve(41) is None
    space.free(120)
    assert space.reserve(100) == (0, 300)  # empty: starts at the beginning again


@given(st.lists(st.tuples(st.integers(1, 64), st.booleans()), max_size=200))
def test_ring_space_never_hands_out_bytes_the_receiver_still_reads(steps):
    space = shm.RingSpace(128)
    live: list[tuple[int, int, int]] = []  # (offset, size, position after), oldest first
    for size, free_one in steps:
        if free_one and live:
            space.free(live.pop(0)[2])
        place = space.reserve(size)
        if place is None:
            assert live, "an empty ring refused a piece no larger than it"
            continue
        offset, end = place
        assert 0 <= offset and offset + size <= 128
        for other_offset, other_size, _ in live:
            assert offset + size <= other_offset or other_offset + other_size <= offset
        live.append((offset, size, end))


async def test_failing_a_channel_fails_its_sends_waiting_for_ring_space_only():
    # A receiver that has left frees nothing more: a sender of a failed channel
    # (a broken group) must not wait for the connection to close.
    outbox = shm.Outbox("test", mmap.mmap(-1, 4096))
    await outbox.reserve(4096, channel=1)  # the ring is full
    first = asyncio.ensure_future(outbox.reserve(64, channel=5))
    other = asyncio.ensure_future(outbox.reserve(64, channel=6))
    await asyncio.sleep(0)
    outbox.fail(MismatchError("channel 5 failed"), channel=5)
    with pytest.raises(MismatchError, match="channel 5 failed"):
        await first
    assert not other.done()
    outbox.freed(4096)
    assert await asyncio.wait_for(other, 1) == (0, 4160)


def test_settings_refuse_a_size_that_is_not_a_positive_number():
    with pytest.raises(ConfigurationError, match="ASYNCOLL_SHM_BYTES must be a positive"):
        Settings.from_environment({"ASYNCOLL_SHM_BYTES": "lots"})


# -- between ranks ----------------------------------------------------------------

async def test_large_payloads_between_same_host_ranks_use_a_ring_and_leave_no_segment(
        monkeypatch):
    monkeypatch.delenv("ASYNCOLL_SHM", raising=False)
    # Neither calling-thread path, which would take 4 MiB: the loop's ring does.
    monkeypatch.setenv("ASYNCOLL_ARENA_BYTES", "0")
    monkeypatch.setenv("ASYNCOLL_LINKS_BYTES", "0")
    before = _ours()

    async def body(world):
        x = np.full(1 << 20, world.rank + 1.0, np.float32)
        await world.all_reduce(x)
        assert (x == 3.0).all()
        return _rings_in_use(world), _ours() - before

    for rings, left in await run_ranks(2, body):
        assert rings == 1
        assert not left, "segments must be unlinked once the peer has mapped them"


async def test_small_payloads_stay_on_tcp(monkeypatch):
    monkeypatch.delenv("ASYNCOLL_SHM", raising=False)

    async def body(world):
        x = np.ones(16, np.float32)
        await world.all_reduce(x)
        return _rings_in_use(world)

    assert await run_ranks(2, body) == [0, 0]


async def test_asyncoll_shm_0_keeps_every_payload_on_tcp(monkeypatch):
    monkeypatch.setenv("ASYNCOLL_SHM", "0")

    async def body(world):
        x = np.full(1 << 20, 1.0, np.float32)
        await world.all_reduce(x)
        return _rings_in_use(world), float(x[0])

    assert await run_ranks(2, body) == [(0, 2.0), (0, 2.0)]


async def test_a_payload_many_times_the_ring_arrives_whole_before_and_after_its_receive(
        small_ring):
    payload = np.arange(100_003, dtype=np.float64)  # 800 KB through a 4 KiB ring

    async def body(world):
        if world.rank == 0:
            await world.send(payload, dst=1)  # completes before rank 1 posts
            await world.barrier()
            await world.send(payload * 2, dst=1)
            return None
        await world.barrier()  # the first payload is kept, unexpected, meanwhile
        first = np.zeros_like(payload)
        await world.recv(first, src=0)
        second = np.zeros_like(payload)
        await world.recv(second, src=0)
        return first, second

    _, (first, second) = await run_ranks(2, body)
    np.testing.assert_array_equal(first, payload)
    np.testing.assert_array_equal(second, payload * 2)


async def test_a_size_mismatch_over_shared_memory_fails_the_receive(small_ring):
    async def body(world):
        if world.rank == 0:
            await world.send(np.ones(5000, np.float32), dst=1)
            return None
        with pytest.raises(MismatchError, match="element count: 4000 on rank 1, 5000 on rank 0"):
            await world.recv(np.ones(4000, np.float32), src=0)
        return True

    assert (await run_ranks(2, body, op_timeout=10))[1] is True


async def test_a_peer_that_cannot_map_the_ring_gets_tcp_and_no_segment_is_left(
        small_ring, monkeypatch):
    def refuse(name, size):
        raise OSError("no such segment here")

    monkeypatch.setattr(shm, "attach", refuse)
    before = _ours()

    async def body(world):
        x = np.full(10_000, world.rank + 1, np.int64)
        await world.all_reduce(x)
        await asyncio.sleep(0)
        return _rings_in_use(world), int(x[0])

    assert await run_ranks(2, body) == [(0, 3), (0, 3)]
    assert _ours() == before


async def test_a_full_dev_shm_falls_back_to_tcp(small_ring, monkeypatch):
    def full(name, size):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shm, "create", full)

    async def body(world):
        x = np.full(10_000, world.rank + 1, np.int64)
        await world.all_reduce(x)
        return _rings_in_use(world), int(x[0])

    assert await run_ranks(2, body) == [(0, 3), (0, 3)]


def test_sweep_removes_only_the_given_processes_segments():
    mine = shm.new_name()
    other = f"{shm.PREFIX}{os.getpid() + 1}-{'0' * 12}"
    for name in (mine, other):
        shm.create(name, 4096).close()
    try:
        assert shm.sweep([os.getpid()]) == [mine]
        assert mine not in _segments() and other in _segments()
    finally:
        shm.unlink(mine)
        shm.unlink(other)


def test_attach_refuses_a_name_asyncoll_does_not_make():
    with pytest.raises(ValueError, match="refusing shared-memory segment"):
        shm.attach("../etc/passwd", 4096)
