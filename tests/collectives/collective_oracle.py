"""The numpy oracle the collective tests compare against, and their exact inputs.

Inputs are small integers (as floats for float dtypes), so every reduction
is exact whatever the order and the oracle can demand equality; integer
overflow wraps identically in any order.
"""

from __future__ import annotations

import numpy as np

from asyncoll import ReduceOp
from asyncoll._algorithms.ops import check_op
from asyncoll.errors import ConfigurationError

_ORACLE = {
    ReduceOp.SUM: np.add, ReduceOp.AVG: np.add, ReduceOp.PRODUCT: np.multiply,
    ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum, ReduceOp.BAND: np.bitwise_and,
    ReduceOp.BOR: np.bitwise_or, ReduceOp.BXOR: np.bitwise_xor,
}


def valid_ops(dtype: np.dtype) -> list[ReduceOp]:
    ops = []
    for op in ReduceOp:
        try:
            check_op(op, dtype)
        except ConfigurationError:
            continue
        ops.append(op)
    return ops


def rank_input(dtype: np.dtype, op: ReduceOp, count: int, rank: int) -> np.ndarray:
    """Small values that keep every reduction exact (products stay tiny)."""
    rng = np.random.default_rng([rank, count, op.value])
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(dtype)
    low, high = (1, 3) if op is ReduceOp.PRODUCT else (0, 9)
    values = rng.integers(low, high, count)
    if dtype.kind in "if" and op is not ReduceOp.PRODUCT:
        values = values - 4
    if dtype.kind == "c":
        return (values + 1j * rng.integers(-2, 3, count)).astype(dtype)
    return values.astype(dtype)


def oracle(inputs: list[np.ndarray], op: ReduceOp) -> np.ndarray:
    result = inputs[0].copy()
    for other in inputs[1:]:
        _ORACLE[op](result, other, out=result)
    if op is ReduceOp.AVG:
        np.divide(result, len(inputs), out=result, casting="unsafe")
    return result


def counts_for(world_size: int) -> list[int]:
    """Element counts every matrix covers: empty, one, fewer than ranks, not divisible."""
    return sorted({0, 1, world_size - 1, 1000, 10_007})
