"""Reduce operations as in-place numpy ufuncs, and which dtypes each accepts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll.errors import ConfigurationError
from asyncoll.types import ReduceOp

_UFUNCS: dict[ReduceOp, Callable[..., object]] = {
    # On bool arrays numpy's add is logical or and multiply logical and,
    # which is what torch gives for SUM and PRODUCT on bool tensors.
    ReduceOp.SUM: np.add,
    ReduceOp.AVG: np.add,
    ReduceOp.PRODUCT: np.multiply,
    ReduceOp.MIN: np.minimum,
    ReduceOp.MAX: np.maximum,
    ReduceOp.BAND: np.bitwise_and,
    ReduceOp.BOR: np.bitwise_or,
    ReduceOp.BXOR: np.bitwise_xor,
}
# A module constant: reading an Enum member off its class costs 0.2 us a time.
_AVG = ReduceOp.AVG
_BITWISE = (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)
# (op, dtype) pairs check_op has accepted: small collectives repeat a few.
_ACCEPTED: set[tuple[ReduceOp, object]] = set()


def coerce_op(op: object) -> ReduceOp:
    """Accept an asyncoll ReduceOp, or torch's ReduceOp / RedOpType by name.

    Raises:
        ConfigurationError: ``op`` names no supported operation.
    """
    if isinstance(op, ReduceOp):
        return op
    # torch.distributed.ReduceOp.SUM is a RedOpType whose name is "SUM";
    # reading the name keeps torch out of the imports.
    name = getattr(op, "name", None)
    if isinstance(name, str) and name in ReduceOp.__members__:
        return ReduceOp[name]
    names = ", ".join(ReduceOp.__members__)
    raise ConfigurationError(f"reduce op {op!r} is not supported; use asyncoll.ReduceOp "
                             f"with one of {names}")


def check_op(op: ReduceOp, dtype: np.dtype[Any]) -> None:
    """Refuse a dtype that ``op`` is not defined for, as torch does.

    Raises:
        ConfigurationError: bitwise ops on float or complex arrays, MIN/MAX on
            complex arrays, AVG on integer or bool arrays.
    """
    if (op, dtype) in _ACCEPTED:
        return
    kind = np.dtype(dtype).kind
    if op in _BITWISE and kind not in "biu":
        raise ConfigurationError(f"{op} needs an integer or bool array, got dtype {dtype}; "
                                 "use SUM, PRODUCT, MIN or MAX, or convert the array")
    if op in (ReduceOp.MIN, ReduceOp.MAX) and kind == "c":
        raise ConfigurationError(f"{op} is not defined on complex dtype {dtype}; reduce the "
                                 "real and imaginary parts (or the magnitudes) separately")
    if op is ReduceOp.AVG and kind in "biu":
        raise ConfigurationError(f"{op} needs a floating or complex array, got dtype {dtype} "
                                 "(torch's gloo fails on it too); use SUM and divide, or "
                                 "convert the array to float")
    if len(_ACCEPTED) < 1024:
        _ACCEPTED.add((op, dtype))


def ufunc_of(op: ReduceOp) -> Callable[..., object]:
    """The numpy ufunc that combines two arrays for ``op`` (AVG's is add: see finish)."""
    return _UFUNCS[op]


def reduce_into(op: ReduceOp, acc: NDArray[Any], incoming: NDArray[Any]) -> None:
    """``acc = acc (op) incoming``, elementwise and in place."""
    _UFUNCS[op](acc, incoming, out=acc)


def combine(op: ReduceOp, first: NDArray[Any], second: NDArray[Any], out: NDArray[Any]) -> None:
    """``out = first (op) second``, elementwise; ``out`` may be either operand.

    Algorithms keep the operands in a fixed order (lower group index first),
    so every rank that computes the same element computes the same expression
    and gets the same bits, NaN payloads and signed zeros included.
    """
    if out is first and out.size == 1:
        # numpy's in-place add of one element (out is the first operand) keeps the
        # second NaN's payload, where every other form keeps the first's: a pair
        # whose members alias different operands would then disagree in the bits.
        out[...] = _UFUNCS[op](first, second)
        return
    _UFUNCS[op](first, second, out=out)


def finish(op: ReduceOp, acc: NDArray[Any], group_size: int) -> None:
    """Apply what remains after the combining step: AVG divides by the group size."""
    if op is _AVG and acc.size:
        np.divide(acc, group_size, out=acc, casting="unsafe")
