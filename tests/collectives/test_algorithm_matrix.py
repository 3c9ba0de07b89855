"""Every algorithm, forced, against the numpy oracle: all_reduce, broadcast, reduce and
reduce_scatter.

The matrix is the all_reduce one (every dtype, every op the dtype allows,
counts 0, 1, world_size - 1, 1000 and 10_007) at world sizes 1 to 7, for each
algorithm of each collective, with every root for broadcast and reduce. The
pipelining segment is cut to 1 KiB so the larger counts travel as many
segments, as large arrays do by default. The arena algorithm runs in the
arena run only (see conftest.py), with slots large enough for every case,
both whole and split (the split size is cut to 256 bytes); the links
algorithm (the transport's algorithms in the calling thread over a group's
own connections) in the TCP run only.
"""

from __future__ import annotations

import numpy as np
import pytest

from collective_oracle import counts_for, oracle, rank_input, valid_ops

from asyncoll import ReduceOp
from asyncoll._algorithms import selection
from asyncoll._wire.dtypes import SUPPORTED_DTYPES
from asyncoll.errors import ConfigurationError
from asyncoll.testing import run_ranks

pytestmark = pytest.mark.timeout(120)

WORLD_SIZES = [1, 2, 3, 4, 5, 6, 7]
DTYPES = [np.dtype(d) for d in SUPPORTED_DTYPES]


@pytest.fixture(autouse=True)
def small_segments(monkeypatch):
    monkeypatch.setattr(selection, "SEGMENT_BYTES", 1024)
    monkeypatch.setattr(selection, "ARENA_SPLIT_FROM_BYTES", 256)


#: Where each fast path runs: the arena in the arena run, direct links in the TCP
#: run and (through each host's arena where they can) in the hierarchy run.
HOMES = {"arena": ("arena",), "links": ("tcp", "hierarchy")}


def with_runs(*algorithms: str) -> pytest.MarkDecorator:
    """Parametrize (algorithm, transport): transport algorithms in every run (see
    conftest.py), fast paths in their own run only, with room for every case."""
    pairs = [(a, run) for a in algorithms
             for run in (HOMES[a] if a in HOMES else ("tcp", "shm", "arena"))]
    return pytest.mark.parametrize("algorithm, transport", pairs, indirect=["transport"])


@pytest.fixture(autouse=True)
def room_on_fast_paths(transport, monkeypatch, request):
    callspec = getattr(request.node, "callspec", None)
    if transport == "hierarchy" and callspec and callspec.params.get("world_size") == 1:
        pytest.skip("one rank runs on one host: it has the arena, not direct links")
    if transport == "arena":
        monkeypatch.setenv("ASYNCOLL_ARENA_BYTES", str(1 << 20))
    if transport in ("tcp", "hierarchy"):
        monkeypatch.setenv("ASYNCOLL_LINKS_BYTES", str(1 << 20))
    if transport == "hierarchy":
        monkeypatch.setenv("ASYNCOLL_ARENA_BYTES", str(1 << 20))


def _cases(world_size):
    return [(dtype, op, count) for dtype in DTYPES for op in valid_ops(dtype)
            for count in counts_for(world_size)]


@with_runs("ring", "recursive_doubling", "arena", "links")
@pytest.mark.parametrize("world_size", WORLD_SIZES)
async def test_all_reduce_algorithm_matches_numpy_bitwise_on_every_rank(world_size, algorithm):
    await _all_reduce_matches_numpy_bitwise(world_size, algorithm)


async def _all_reduce_matches_numpy_bitwise(world_size, algorithm):
    cases = _cases(world_size)

    async def body(world):
        results = []
        for dtype, op, count in cases:
            x = rank_input(dtype, op, count, world.rank)
            await world.all_reduce(x, op=op, algorithm=algorithm)
            results.append(x)
        return results

    per_rank = await run_ranks(world_size, body)
    for index, (dtype, op, count) in enumerate(cases):
        expected = oracle([rank_input(dtype, op, count, r) for r in range(world_size)], op)
        for rank in range(world_size):
            got = per_rank[rank][index]
            np.testing.assert_array_equal(got, expected, err_msg=f"{dtype} {op} n={count}")
            assert got.tobytes() == per_rank[0][index].tobytes(), "ranks differ bitwise"


@pytest.mark.parametrize("transport", ["tcp"], indirect=True)
@pytest.mark.parametrize("world_size", [2, 3, 4, 5])
async def test_ring_all_reduce_over_direct_links_matches_numpy_bitwise(world_size, monkeypatch):
    # Direct links run the transport's algorithm for the size, the ring from
    # 2 MiB by default: from every size here, so that the ring's reduce-scatter
    # and all-gather, one pipeline, run over blocking links too.
    monkeypatch.setattr(selection, "ALL_REDUCE_RING_FROM_BYTES", 0)
    monkeypatch.setattr(selection, "ALL_REDUCE_RING_FROM_BYTES_UNEVEN", 0)
    await _all_reduce_matches_numpy_bitwise(world_size, "links")


@with_runs("tree", "chain", "arena", "links")
@pytest.mark.parametrize("world_size", WORLD_SIZES)
async def test_reduce_algorithm_matches_numpy_on_root_and_leaves_others_alone(world_size,
                                                                              algorithm):
    cases = [(root, dtype, op, count) for root in range(world_size)
             for dtype, op, count in _cases(world_size)[root::world_size]]

    async def body(world):
        results = []
        for root, dtype, op, count in cases:
            x = rank_input(dtype, op, count, world.rank)
            await world.reduce(x, root, op=op, algorithm=algorithm)
            results.append(x)
        return results

    per_rank = await run_ranks(world_size, body)
    for index, (root, dtype, op, count) in enumerate(cases):
        inputs = [rank_input(dtype, op, count, r) for r in range(world_size)]
        for rank in range(world_size):
            expected = oracle(inputs, op) if rank == root else inputs[rank]
            np.testing.assert_array_equal(per_rank[rank][index], expected,
                                          err_msg=f"{dtype} {op} n={count} root={root}")


@with_runs("tree", "chain", "arena", "links")
@pytest.mark.parametrize("world_size", WORLD_SIZES)
async def test_broadcast_algorithm_copies_the_root_everywhere(world_size, algorithm):
    cases = [(root, dtype, count) for root in range(world_size) for dtype in DTYPES
             for count in counts_for(world_size)]

    async def body(world):
        results = []
        for root, dtype, count in cases:
            x = rank_input(dtype, ReduceOp.SUM, count, world.rank)
            await world.broadcast(x, root, algorithm=algorithm)
            results.append(x)
        return results

    per_rank = await run_ranks(world_size, body)
    for index, (root, dtype, count) in enumerate(cases):
        expected = rank_input(dtype, ReduceOp.SUM, count, root)
        for rank in range(world_size):
            assert per_rank[rank][index].tobytes() == expected.tobytes(), (
                f"{dtype} n={count} root={root} rank={rank}")


@with_runs("ring", "arena", "links")
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
async def test_reduce_scatter_algorithm_matches_numpy_bitwise_on_every_rank(world_size,
                                                                            algorithm):
    cases = [(dtype, op, count) for dtype, op, count in _cases(world_size) if count < 10_000]

    async def body(world):
        results = []
        for dtype, op, count in cases:
            x = rank_input(dtype, op, count * world_size, world.rank)
            out = np.empty(count, dtype=dtype)
            await world.reduce_scatter_tensor(out, x, op=op, algorithm=algorithm)
            results.append(out)
        return results

    per_rank = await run_ranks(world_size, body)
    for index, (dtype, op, count) in enumerate(cases):
        whole = oracle([rank_input(dtype, op, count * world_size, r)
                        for r in range(world_size)], op)
        for rank in range(world_size):
            np.testing.assert_array_equal(per_rank[rank][index],
                                          whole[rank * count:(rank + 1) * count],
                                          err_msg=f"{dtype} {op} n={count} rank={rank}")


def test_forced_algorithm_spec_names_collectives_or_applies_everywhere():
    assert selection.parse_forced("all_reduce=recursive_doubling, chain") == {
        "all_reduce": "recursive_doubling", "broadcast": "chain", "reduce": "chain"}
    assert selection.parse_forced("ring") == {"all_reduce": "ring", "all_gather": "ring",
                                              "reduce_scatter": "ring"}
    assert set(selection.parse_forced("arena")) == set(selection.ALGORITHMS)
    assert selection.parse_forced("links")["reduce_scatter"] == "links"
    with pytest.raises(ConfigurationError, match="'broadcast' has no algorithm 'ring'"):
        selection.parse_forced("broadcast=ring")
    with pytest.raises(ConfigurationError, match="'fastest', which is no algorithm"):
        selection.parse_forced("fastest")


@pytest.mark.parametrize("spec, expected", [
    ("all_reduce=recursive_doubling", "recursive_doubling"), ("ring", "ring")])
async def test_environment_forces_the_algorithm_a_collective_runs(monkeypatch, spec, expected):
    ran = []
    real = selection.choose

    def spy(collective, nbytes, size, forced=None, path="", capacity=0, up_to=None):
        choice = real(collective, nbytes, size, forced, path, capacity, up_to)
        ran.append((collective, choice))
        return choice

    monkeypatch.setenv("ASYNCOLL_ALGORITHM", spec)
    monkeypatch.setattr(selection, "choose", spy)

    async def body(world):
        x = np.ones(100_000 if expected == "recursive_doubling" else 3, dtype=np.float32)
        await world.all_reduce(x)
        return x

    for x in await run_ranks(2, body):
        np.testing.assert_array_equal(x, 2)
    assert set(ran) == {("all_reduce", expected)}


def test_selector_picks_the_latency_algorithm_for_small_arrays_and_the_ring_for_large():
    assert selection.choose("all_reduce", 4, 2) == "recursive_doubling"
    assert selection.choose("all_reduce", 4, 2, path="arena", capacity=1 << 20) == "arena"
    # The arena takes every size of every collective (in pieces), barrier included.
    for collective in ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"):
        assert selection.choose(collective, 64 << 20, 2, path="arena",
                                capacity=selection.ANY_SIZE) == "arena"
    assert selection.choose("all_reduce", 8 << 20, 4, path="links", capacity=8 << 20) == "links"
    # Recursive doubling up to the ring's threshold, by the group's size.
    assert selection.choose("all_reduce", 1 << 20, 4) == "recursive_doubling"
    assert selection.choose("all_reduce", 2 << 20, 4) == "ring"
    assert selection.choose("all_reduce", 2 << 20, 3) == "recursive_doubling"
    assert selection.choose("all_reduce", 4 << 20, 3) == "ring"
    assert selection.choose("barrier", 0, 3, path="arena", capacity=1) == "arena"
    assert selection.choose("all_reduce", 4, 2, path="links", capacity=1 << 20) == "links"
    assert selection.choose("reduce_scatter", 4, 2, path="links", capacity=1 << 20) == "links"
    assert selection.choose("reduce_scatter", 2 << 20, 2, path="links",
                            capacity=8 << 20) == "ring"
    with pytest.raises(ConfigurationError, match="this group has none"):
        selection.choose("all_reduce", 4, 2, forced="arena")
    with pytest.raises(ConfigurationError, match="this group has none"):
        selection.choose("all_reduce", 4, 2, forced="links", path="arena", capacity=9)
    with pytest.raises(ConfigurationError, match="take at most 1024 bytes"):
        selection.choose("broadcast", 2048, 2, forced="links", path="links", capacity=1024)
    assert selection.choose("all_reduce", 64 << 20, 2) == "ring"
    assert selection.choose("broadcast", 4, 4) == "tree"
    assert selection.choose("broadcast", 64 << 20, 4) == "chain"
    assert selection.choose("reduce", 64 << 20, 4, forced="tree") == "tree"
    with pytest.raises(ConfigurationError, match="all_reduce has no algorithm 'chain'"):
        selection.choose("all_reduce", 4, 2, forced="chain")
