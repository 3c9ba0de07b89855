"""The compressed ring all-reduce over in-process meshes: identical bits on every
member, within the stated bound of the exact sum, NaN and infinities as the exact
sum gives them."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from asyncoll._algorithms.chunking import chunk_bounds
from asyncoll._algorithms.compressed_ring import codec_segments, compressed_ring_all_reduce
from asyncoll._algorithms.compression import DEFAULT_BLOCK, codec, error_bound
from asyncoll._algorithms.team import Team
from asyncoll._wire.frames import Fingerprint, Operation
from asyncoll.types import ReduceOp
from memory_mesh import memory_meshes  # tests/transport/memory_mesh.py

pytestmark = pytest.mark.timeout(60)

_RNG = np.random.default_rng(62)


async def _all_reduce(arrays: list[np.ndarray], mode: str, op: ReduceOp = ReduceOp.SUM,
                      segment_bytes: int = 1000) -> None:
    size = len(arrays)
    teams = [Team(mesh, range(size), 0, 1, fingerprint=Fingerprint(Operation.ALL_REDUCE, 1))
             for mesh in memory_meshes(size)]
    coder = codec(mode, arrays[0].dtype)
    await asyncio.gather(*(compressed_ring_all_reduce(team, data, op, coder, segment_bytes)
                           for team, data in zip(teams, arrays)))


def _magnitude(mode: str, inputs: list[np.ndarray], size: int) -> np.ndarray:
    """Per element, what the bound scales with: the sum over members of |x| (bf16), or
    of the largest |x| in the element's int8 block (blocks start at each member's part)."""
    if mode == "bf16":
        return sum(np.abs(x.astype(np.float64)) for x in inputs)
    total = np.zeros(inputs[0].size)
    for x in inputs:
        for lo, hi in chunk_bounds(x.size, size):
            part = np.abs(x[lo:hi].astype(np.float64))
            for start in range(0, part.size, DEFAULT_BLOCK):
                stop = start + DEFAULT_BLOCK
                total[lo + start:lo + stop] += part[start:stop].max()
    return total


@pytest.mark.parametrize("mode, dtype", [("bf16", np.float32), ("int8", np.float32),
                                         ("int8", np.float64)])
@pytest.mark.parametrize("size, count", [(2, 1000), (3, 1001), (4, 0), (5, 77), (4, 5000)])
async def test_every_member_gets_the_same_bits_within_the_bound(mode, dtype, size, count):
    inputs = [(_RNG.standard_normal(count) * 10 ** _RNG.uniform(-3, 3, count)).astype(dtype)
              for _ in range(size)]
    arrays = [x.copy() for x in inputs]

    await _all_reduce(arrays, mode)

    for data in arrays[1:]:
        np.testing.assert_array_equal(data.view(np.uint8), arrays[0].view(np.uint8))
    exact = sum(x.astype(np.float64) for x in inputs)
    bound = error_bound(mode, np.dtype(dtype), size, _magnitude(mode, inputs, size))
    assert (np.abs(arrays[0] - exact) <= bound).all()


@pytest.mark.parametrize("mode", ["bf16", "int8"])
async def test_avg_divides_the_compressed_sum_and_stays_within_its_bound(mode):
    inputs = [_RNG.standard_normal(2000).astype(np.float32) for _ in range(4)]
    arrays = [x.copy() for x in inputs]

    await _all_reduce(arrays, mode, ReduceOp.AVG)

    exact = sum(x.astype(np.float64) for x in inputs) / 4
    bound = error_bound(mode, np.dtype(np.float32), 4, _magnitude(mode, inputs, 4)) / 4
    assert (np.abs(arrays[0] - exact) <= bound + 2.0 ** -24 * np.abs(exact)).all()
    assert all((a == arrays[0]).all() for a in arrays)


@pytest.mark.parametrize("mode", ["bf16", "int8"])
async def test_nan_and_infinities_come_through_as_the_exact_sum_gives_them(mode):
    size, count = 3, 900
    inputs = [_RNG.standard_normal(count).astype(np.float32) for _ in range(size)]
    inputs[0][[5, 400]] = np.nan
    inputs[1][[7, 401, 402]] = np.inf
    inputs[2][[7, 403]] = -np.inf  # element 7: inf - inf
    arrays = [x.copy() for x in inputs]

    await _all_reduce(arrays, mode)

    with np.errstate(invalid="ignore"):
        exact = sum(x.astype(np.float64) for x in inputs)
    finite = np.isfinite(exact)
    for data in arrays:
        np.testing.assert_array_equal(np.isnan(data), np.isnan(exact))
        np.testing.assert_array_equal(data[np.isinf(exact)], exact[np.isinf(exact)])
    magnitude = _magnitude(mode, [np.where(np.isfinite(x), x, 0) for x in inputs], size)
    bound = error_bound(mode, np.dtype(np.float32), size, magnitude)
    assert (np.abs(arrays[0][finite] - exact[finite]) <= bound[finite]).all()


async def test_a_group_of_one_keeps_its_data_exact():
    data = _RNG.standard_normal(100).astype(np.float32)
    expected = data / 1

    await _all_reduce([data], "int8", ReduceOp.AVG)

    np.testing.assert_array_equal(data, expected)


def test_segments_hold_whole_int8_blocks_but_the_last():
    coder = codec("int8", np.dtype(np.float32), 256)

    cuts = codec_segments(10_000, coder, 4096)

    assert cuts[0] == (0, cuts[0][1]) and cuts[-1][1] == 10_000
    assert all(lo % 256 == 0 for lo, _ in cuts)
    assert all(hi == lo2 for (_, hi), (lo2, _) in zip(cuts, cuts[1:]))
    assert codec_segments(0, coder, 4096) == []


@pytest.mark.parametrize("mode, op", [("int8", ReduceOp.SUM), ("bf16", ReduceOp.SUM),
                                      ("int8", ReduceOp.AVG)])
async def test_error_feedback_keeps_the_errors_of_many_steps_from_adding_up(mode, op):
    # The same inputs every step: without feedback each step drops the same, and the
    # steps' sum drifts by steps x that; with it, the drift stays one step's error.
    size, count, steps = 3, 3000, 40
    inputs = [(_RNG.standard_normal(count) * 10 ** _RNG.uniform(-2, 2, count)).astype(
        np.float32) for _ in range(size)]
    exact = sum(x.astype(np.float64) for x in inputs) / (size if op is ReduceOp.AVG else 1)
    drift = {}
    for feedback in (False, True):
        residuals = [np.zeros(count, np.float32) for _ in range(size)]
        total = np.zeros(count)
        for _ in range(steps):
            arrays = [x + r if feedback else x.copy() for x, r in zip(inputs, residuals)]
            teams = [Team(mesh, range(size), 0, 1,
                          fingerprint=Fingerprint(Operation.ALL_REDUCE, 1))
                     for mesh in memory_meshes(size)]
            coder = codec(mode, np.dtype(np.float32))
            await asyncio.gather(*(compressed_ring_all_reduce(
                team, data, op, coder, 1000, r if feedback else None)
                for team, data, r in zip(teams, arrays, residuals)))
            total += arrays[0]
        drift[feedback] = np.abs(total - steps * exact).max()
    one_step = error_bound(mode, np.dtype(np.float32), size,
                           _magnitude(mode, inputs, size)).max()
    assert drift[False] > steps / 4 * drift[True]
    assert drift[True] <= 2 * one_step
