"""Compressed all_reduce between hosts: the same bits on every rank, within the
stated bound of the exact sum; exact on one host; refused where it cannot hold.

The ranks pretend to run on several hosts (run_ranks' ``hosts``), so their
frames cross TCP as between machines.
"""

from __future__ import annotations

import numpy as np
import pytest

from asyncoll import Compression, ReduceOp
from asyncoll._algorithms.chunking import chunk_bounds
from asyncoll._algorithms.compression import DEFAULT_BLOCK, error_bound
from asyncoll.errors import ConfigurationError, MismatchError
from asyncoll.testing import run_ranks

pytestmark = pytest.mark.timeout(120)


def _inputs(rank: int, count: int, dtype: type = np.float32) -> np.ndarray:
    rng = np.random.default_rng(rank)
    return (rng.standard_normal(count) * 10 ** rng.uniform(-2, 2, count)).astype(dtype)


def _int8_magnitude(inputs: list[np.ndarray], members: int = 0) -> np.ndarray:
    """Per element, the sum over ranks of the largest |x| in its int8 block, the blocks
    counted from the start of each of the ring's ``members`` parts (all ranks': 0)."""
    total = np.zeros(inputs[0].size)
    for x in inputs:
        for lo, hi in chunk_bounds(x.size, members or len(inputs)):
            for start in range(lo, hi, DEFAULT_BLOCK):
                stop = min(start + DEFAULT_BLOCK, hi)
                total[start:stop] += np.abs(x[start:stop].astype(np.float64)).max()
    return total


@pytest.mark.parametrize("mode, dtype", [("bf16", np.float32), ("int8", np.float32),
                                         ("int8", np.float64)])
@pytest.mark.parametrize("world_size", [2, 3])
async def test_ranks_on_different_hosts_get_the_same_bits_within_the_bound(mode, dtype,
                                                                          world_size):
    count = 300_001

    async def body(world):
        x = _inputs(world.rank, count, dtype)
        await world.all_reduce(x, compression=mode)
        return x

    results = await run_ranks(world_size, body, hosts=world_size)

    for x in results[1:]:
        np.testing.assert_array_equal(x.view(np.uint8), results[0].view(np.uint8))
    inputs = [_inputs(rank, count, dtype) for rank in range(world_size)]
    exact = sum(x.astype(np.float64) for x in inputs)
    magnitude = sum(np.abs(x.astype(np.float64)) for x in inputs) if mode == "bf16" \
        else _int8_magnitude(inputs)
    assert (np.abs(results[0] - exact) <= error_bound(mode, np.dtype(dtype), world_size,
                                                      magnitude)).all()
    assert not np.array_equal(results[0], exact.astype(dtype))  # it did compress


async def test_ranks_on_one_host_get_the_exact_sum_and_keep_no_residual():
    async def body(world):
        x, y = _inputs(world.rank, 5000), _inputs(world.rank, 5000)
        compression = Compression("int8", error_feedback=True)
        compression.residual(x)[:] = 1.0  # as a residual from calls between hosts
        await world.all_reduce(x, compression=compression)
        await world.all_reduce(y)
        return x - 2, y, compression.residual(x)

    for x, y, residual in await run_ranks(2, body, hosts=1):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-4)  # the residual added once
        assert not residual.any()


@pytest.mark.parametrize("op, dtype, words", [
    (ReduceOp.MAX, np.float32, "SUM and AVG only"),
    (ReduceOp.SUM, np.int64, "integers"),
    (ReduceOp.SUM, np.float64, "float32's range"),
])
async def test_what_compression_cannot_bound_is_refused_before_anything_is_sent(op, dtype,
                                                                               words):
    async def body(world):
        with pytest.raises(ConfigurationError, match=words):
            world.all_reduce(np.ones(10, dtype), op=op,
                             compression="int8" if dtype != np.float64 else "bf16")
        x = np.full(4, world.rank + 1.0, np.float32)
        await world.all_reduce(x)  # the group is intact: nothing was sent
        return x

    for x in await run_ranks(2, body, hosts=2):
        assert x.tolist() == [3.0] * 4


async def test_a_rank_that_compresses_beside_one_that_does_not_raises_mismatch():
    async def body(world):
        x = np.ones(1 << 20, np.float32)
        with pytest.raises(MismatchError):
            await world.all_reduce(x, compression="int8" if world.rank == 0 else None)

    await run_ranks(2, body, hosts=2, op_timeout=20)


@pytest.mark.parametrize("mode", ["bf16", "int8"])
async def test_several_ranks_a_host_sum_exactly_within_hosts_and_compress_between(
        monkeypatch, mode):
    monkeypatch.setenv("ASYNCOLL_SHM", "1")
    monkeypatch.delenv("ASYNCOLL_HIERARCHY", raising=False)
    count, world_size, hosts = 100_001, 4, 2

    async def body(world):
        x = _inputs(world.rank, count)
        await world.all_reduce(x, compression=mode)
        small = np.full(3, world.rank + 0.1, np.float32)
        await world.all_reduce(small, op=ReduceOp.AVG, compression=mode)
        return x, small, type(world._core._fast).__name__

    results = await run_ranks(world_size, body, hosts=hosts)

    assert {kind for _, _, kind in results} == {"HostHierarchy"}
    for x, small, _ in results[1:]:
        np.testing.assert_array_equal(x.view(np.uint8), results[0][0].view(np.uint8))
        np.testing.assert_array_equal(small.view(np.uint8), results[0][1].view(np.uint8))
    inputs = [_inputs(rank, count) for rank in range(world_size)]
    exact = sum(x.astype(np.float64) for x in inputs)
    # The ring runs among the 2 hosts' leaders, on each host's exact sum (whose own
    # rounding, in float32, is the last term); both magnitudes bound the hosts' sums'.
    magnitude = sum(np.abs(x.astype(np.float64)) for x in inputs) if mode == "bf16" \
        else _int8_magnitude(inputs, hosts)
    bound = error_bound(mode, np.dtype(np.float32), hosts, magnitude) + \
        world_size * 2.0 ** -23 * sum(np.abs(x.astype(np.float64)) for x in inputs)
    assert (np.abs(results[0][0] - exact) <= bound).all()
    assert not np.array_equal(results[0][0], exact.astype(np.float32))
    assert np.abs(results[0][1] - 1.6).max() < 0.02


@pytest.mark.parametrize("world_size, hosts", [(2, 2), (4, 2)], ids=["flat", "hierarchy"])
async def test_error_feedback_through_the_api_keeps_the_steps_errors_from_adding_up(
        monkeypatch, world_size, hosts):
    monkeypatch.setenv("ASYNCOLL_SHM", "1")
    count, steps = 20_000, 30

    async def body(world):
        drift = {}
        for feedback in (False, True):
            compression = Compression("int8", error_feedback=feedback)
            total = np.zeros(count)
            for _ in range(steps):
                x = _inputs(world.rank, count)
                await world.all_reduce(x, compression=compression)
                total += x
            drift[feedback] = total
        return drift

    results = await run_ranks(world_size, body, hosts=hosts)

    exact = steps * sum(_inputs(rank, count).astype(np.float64) for rank in range(world_size))
    without, with_feedback = (np.abs(results[0][f] - exact).max() for f in (False, True))
    assert without > steps / 4 * with_feedback
    for drift in results[1:]:
        np.testing.assert_array_equal(drift[True], results[0][True])
