"""all_reduce on N ranks in one event loop over real loopback TCP, against numpy.

The matrix is world size x dtype, and inside each case every reduce op the
dtype allows x counts 0, 1, world_size - 1, 1000 and 10_007. Inputs are
small integers (as floats for float dtypes), so every result is exact
whatever the reduction order and the oracle can demand equality; integer
overflow wraps identically in any order. A separate case checks random
real-valued floats to a tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from collective_oracle import counts_for, oracle, rank_input, valid_ops

from asyncoll import ReduceOp
from asyncoll._wire.dtypes import SUPPORTED_DTYPES
from asyncoll.testing import run_ranks

pytestmark = pytest.mark.timeout(120)

WORLD_SIZES = [1, 2, 3, 4, 7]


@pytest.mark.parametrize("dtype", [str(d) for d in SUPPORTED_DTYPES])
@pytest.mark.parametrize("world_size", WORLD_SIZES)
async def test_all_reduce_matches_numpy_and_is_identical_on_every_rank(world_size, dtype):
    dtype = np.dtype(dtype)
    cases = [(op, count) for op in valid_ops(dtype)
             for count in counts_for(world_size)]

    async def body(world):
        results = []
        for op, count in cases:
            x = rank_input(dtype, op, count, world.rank)
            await world.all_reduce(x, op=op)
            results.append(x)
        return results

    per_rank = await run_ranks(world_size, body)
    for index, (op, count) in enumerate(cases):
        expected = oracle([rank_input(dtype, op, count, r) for r in range(world_size)], op)
        for rank in range(world_size):
            got = per_rank[rank][index]
            assert got.dtype == dtype
            np.testing.assert_array_equal(got, expected,
                                          err_msg=f"{op} count={count} rank={rank}")
            assert got.tobytes() == per_rank[0][index].tobytes(), "ranks differ bitwise"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("world_size", [2, 5])
async def test_all_reduce_of_random_floats_is_close_to_numpy_and_bitwise_equal(world_size,
                                                                                dtype):
    def data(rank):
        return np.random.default_rng(rank).standard_normal(4099).astype(dtype)

    async def body(world):
        x = data(world.rank)
        await world.all_reduce(x, op=ReduceOp.AVG)
        return x

    results = await run_ranks(world_size, body)
    expected = np.mean([data(r) for r in range(world_size)], axis=0)
    for got in results:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        assert got.tobytes() == results[0].tobytes()


async def test_all_reduce_of_multidimensional_and_strided_arrays_writes_every_element():
    async def body(world):
        grid = np.arange(24, dtype=np.int32).reshape(2, 3, 4) * (world.rank + 1)
        transposed = np.arange(16, dtype=np.float64).reshape(4, 4).T.copy().T  # F-order
        column = np.zeros((5, 3), dtype=np.int64)
        column[:, 1] = world.rank + 1
        view = column[:, 1]  # non-contiguous
        await world.all_reduce(grid)
        await world.all_reduce(transposed, op=ReduceOp.MAX)
        await world.all_reduce(view, op=ReduceOp.PRODUCT)
        return grid, transposed, column

    for grid, transposed, column in await run_ranks(3, body):
        np.testing.assert_array_equal(grid, np.arange(24).reshape(2, 3, 4) * 6)
        np.testing.assert_array_equal(transposed, np.arange(16).reshape(4, 4))
        np.testing.assert_array_equal(column[:, 1], np.full(5, 6))
        assert not column[:, [0, 2]].any(), "elements outside the view were touched"
