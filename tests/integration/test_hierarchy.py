"""Groups spanning hosts, several members on some: each host's arena, one member per host.

The ranks pretend to run on several hosts (run_ranks' ``hosts``: their
hostnames differ), so a group's small all_reduce, broadcast, reduce and
barrier run through each host's arena and over direct links between one
member per host (asyncoll._group.hierarchy). The tests check the results
against numpy on every rank, bit for bit alike across ranks, that the
hierarchy really ran, and that the links connect only the members the
algorithms use. tests/collectives runs its whole matrix this way too (its
"hierarchy" run).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from asyncoll import ReduceOp
from asyncoll._group.hierarchy import HostHierarchy
from asyncoll.testing import run_ranks

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def arenas_on(monkeypatch):
    monkeypatch.setenv("ASYNCOLL_SHM", "1")
    monkeypatch.delenv("ASYNCOLL_HIERARCHY", raising=False)


def hierarchy_of(world) -> HostHierarchy | None:
    """The group's hierarchy, where its fast path is one (else None: flat links)."""
    fast = world._core._fast
    return fast if isinstance(fast, HostHierarchy) else None


def inputs(rank: int, count: int) -> np.ndarray:
    return (np.arange(count, dtype=np.float32) % 7 + rank + 1).astype(np.float32)


@pytest.mark.parametrize("world_size, hosts", [(4, 2), (5, 3), (6, 3), (8, 2)])
async def test_small_collectives_run_through_each_hosts_arena_and_match_numpy(world_size,
                                                                             hosts):
    async def body(world):
        n, me = world.size, world.rank
        results = []
        for op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.PRODUCT):
            for count in (0, 1, 1000):
                x = inputs(me, count)
                await world.all_reduce(x, op=op)
                results.append(x.tobytes())
        for root in range(n):
            x = inputs(me, 100) if me == root else np.zeros(100, np.float32)
            await world.broadcast(x, src=root)
            assert np.array_equal(x, inputs(root, 100)), (root, me)
            y = inputs(me, 100)
            await world.reduce(y, dst=root, op=ReduceOp.SUM)
            if me == root:
                expected = sum(inputs(r, 100).astype(np.float64) for r in range(n))
                np.testing.assert_allclose(y, expected, rtol=1e-6)
            else:
                # Only the root's array changes.
                assert np.array_equal(y, inputs(me, 100)), (root, me)
            await world.barrier()
        hierarchy = hierarchy_of(world)
        mapped = hierarchy is not None and hierarchy.arena is not None and \
            hierarchy.arena.ready
        return results, hierarchy, (world._core._fast.links.connected, mapped)

    outcomes = await run_ranks(world_size, body, hosts=hosts)
    for results, _, _ in outcomes[1:]:
        assert results == outcomes[0][0]  # the same bits on every rank
    index = 0
    for op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.PRODUCT):
        for count in (0, 1, 1000):
            got = np.frombuffer(outcomes[0][0][index], dtype=np.float32)
            stack = np.stack([inputs(r, count).astype(np.float64)
                              for r in range(world_size)])
            expected = {ReduceOp.SUM: stack.sum(0), ReduceOp.AVG: stack.mean(0),
                        ReduceOp.MAX: stack.max(0), ReduceOp.PRODUCT: stack.prod(0)}[op]
            np.testing.assert_allclose(got, expected, rtol=1e-5)
            index += 1
    first = outcomes[0][1]
    assert first is not None and first.room > 0, "the group did not set up its hierarchy"
    for rank, (_, hierarchy, (connected, mapped)) in enumerate(outcomes):
        if len(hierarchy.local) > 1:
            assert mapped, f"rank {rank} has no arena on its host"
        # Ring neighbours (opened at set-up), and partners among the hosts' leaders
        # (doubling and the tree; every rank is its host's leader as a root).
        bound = 2 + 2 * math.ceil(math.log2(len(hierarchy.hosts))) + 1
        assert connected <= bound, (rank, connected, bound)


async def test_hierarchy_off_keeps_flat_links_and_the_same_results(monkeypatch):
    monkeypatch.setenv("ASYNCOLL_HIERARCHY", "0")

    async def body(world):
        x = inputs(world.rank, 10)
        await world.all_reduce(x)
        return x, hierarchy_of(world)

    outcomes = await run_ranks(4, body, hosts=2)
    expected = sum(inputs(r, 10) for r in range(4))
    for x, hierarchy in outcomes:
        assert hierarchy is None
        assert np.array_equal(x, expected)


async def test_one_rank_wanting_no_hierarchy_turns_it_off_on_every_rank(monkeypatch):
    # Members must agree on the path: the set-up's directory says who wants it.
    from asyncoll._runtime import session as session_module

    made = session_module.Session.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.policy = dataclasses.replace(self.policy,
                                          hierarchy=self.policy.hierarchy and self.rank != 3)

    monkeypatch.setattr(session_module.Session, "__init__", init)

    async def body(world):
        x = inputs(world.rank, 10)
        await world.all_reduce(x)
        await world.barrier()
        return x, hierarchy_of(world)

    outcomes = await run_ranks(4, body, hosts=2)
    expected = sum(inputs(r, 10) for r in range(4))
    for x, hierarchy in outcomes:
        assert hierarchy is None or not hierarchy.room
        assert np.array_equal(x, expected)


async def test_broadcast_and_reduce_of_megabytes_take_the_hierarchy():
    # Above the flat links' 1 MiB bound: a group with a hierarchy takes them on its
    # links up to selection.HIERARCHY_UP_TO_BYTES, through each host's arena.
    count = (3 << 20) // 4

    async def body(world):
        me = world.rank
        h = hierarchy_of(world)
        before = h.arena._step.operation if h.arena._step is not None else 0
        x = inputs(me, count) if me == 1 else np.zeros(count, np.float32)
        await world.broadcast(x, src=1)
        y = inputs(me, count)
        await world.reduce(y, dst=2)
        return x, y, h.arena._step.operation - before

    outcomes = await run_ranks(4, body, hosts=2)
    expected = sum(inputs(r, count).astype(np.float64) for r in range(4))
    for rank, (x, y, arena_operations) in enumerate(outcomes):
        assert np.array_equal(x, inputs(1, count))
        if rank == 2:
            np.testing.assert_allclose(y, expected, rtol=1e-6)
        else:
            assert np.array_equal(y, inputs(rank, count))
        # One arena operation per piece: 3 MiB is 3 pieces of broadcast, 6 of reduce.
        assert arena_operations == 3 + 6, (rank, arena_operations)


@pytest.mark.parametrize("world_size, hosts", [(4, 2), (7, 3)])
async def test_all_reduce_of_any_size_takes_the_hierarchy_with_a_ring_of_leaders(world_size,
                                                                                hosts):
    # Above the arena's 8 MiB slot and the flat links' 8 MiB: each host's arena in
    # pieces, and the ring among the hosts' leaders (socket_choice's, from 2 MiB).
    count = (9 << 20) // 8

    async def body(world):
        me = world.rank
        h = hierarchy_of(world)
        x = np.arange(count, dtype=np.int64) % 1000 * (me + 1)
        y = np.full(count, me + 1, dtype=np.float64) / 3
        await world.all_reduce(x)
        before = h.arena._step.operation
        await world.all_reduce(y, op=ReduceOp.AVG)
        return x, y.tobytes(), h.arena._step.operation - before, world._core._fast.algorithm

    outcomes = await run_ranks(world_size, body, hosts=hosts)
    total = world_size * (world_size + 1) // 2
    for x, y, arena_operations, algorithm in outcomes:
        assert algorithm == "links"
        assert np.array_equal(x, np.arange(count, dtype=np.int64) % 1000 * total)
        assert y == outcomes[0][1]  # the same bits on every rank
        # 9 MiB: 18 pieces of the in-host reduce, 9 of the broadcast after.
        assert arena_operations == 18 + 9, arena_operations
    mean = np.frombuffer(outcomes[0][1], dtype=np.float64)
    np.testing.assert_allclose(mean, (total / 3) / world_size, rtol=1e-12)
