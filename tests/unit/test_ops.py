"""Reduce ops: coercion from torch-like ops, dtype refusals, results against numpy, and
the same bits whichever operand combine writes into."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from asyncoll._algorithms.ops import check_op, coerce_op, combine, finish, reduce_into
from asyncoll.errors import ConfigurationError
from asyncoll.types import ReduceOp

pytestmark = pytest.mark.timeout(60)

BOOL: list[np.dtype] = [np.dtype(np.bool_)]
INTS: list[np.dtype] = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
UINTS: list[np.dtype] = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)]
FLOATS: list[np.dtype] = [np.dtype(t) for t in (np.float16, np.float32, np.float64)]
COMPLEX: list[np.dtype] = [np.dtype(t) for t in (np.complex64, np.complex128)]
ALL = BOOL + INTS + UINTS + FLOATS + COMPLEX
BITWISE = [ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR]


class _RedOpType:
    """Stands in for torch.distributed.ReduceOp.RedOpType: an object with a name."""

    def __init__(self, name: object) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<RedOpType {self.name}>"


def _accepts(op: ReduceOp, dtype: np.dtype) -> bool:
    if op in BITWISE:
        return dtype.kind in "biu"
    if op in (ReduceOp.MIN, ReduceOp.MAX):
        return dtype.kind != "c"
    if op is ReduceOp.AVG:
        return dtype.kind in "fc"
    return True


VALID = [(op, dt) for op in ReduceOp for dt in ALL if _accepts(op, dt)]
INVALID = [(op, dt) for op in ReduceOp for dt in ALL if not _accepts(op, dt)]


def _ids(pair: object) -> str:
    return str(pair)


# -- coerce_op ------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(ReduceOp), ids=str)
def test_coerce_op_returns_an_asyncoll_op_unchanged(op: ReduceOp) -> None:
    assert coerce_op(op) is op


@pytest.mark.parametrize("op", list(ReduceOp), ids=str)
def test_coerce_op_accepts_an_object_named_like_the_op(op: ReduceOp) -> None:
    assert coerce_op(_RedOpType(op.name)) is op


def test_coerce_op_accepts_torch_reduce_op_sum() -> None:
    dist = pytest.importorskip("torch.distributed")

    assert coerce_op(dist.ReduceOp.SUM) is ReduceOp.SUM
    assert coerce_op(dist.ReduceOp.MAX) is ReduceOp.MAX


@pytest.mark.parametrize("junk", [None, 0, "SUM", "sum", ReduceOp.SUM.value, object(),
                                  _RedOpType("sum"), _RedOpType("PREMUL_SUM"),
                                  _RedOpType(0), _RedOpType(None)], ids=repr)
def test_coerce_op_refuses_anything_else_listing_the_ops(junk: object) -> None:
    with pytest.raises(ConfigurationError, match="is not supported") as info:
        coerce_op(junk)

    message = str(info.value)
    assert repr(junk) in message
    assert all(name in message for name in ReduceOp.__members__)


# -- check_op --------------------------------------------------------------------------


@pytest.mark.parametrize("op, dtype", VALID, ids=_ids)
def test_check_op_accepts_valid_pairs(op: ReduceOp, dtype: np.dtype) -> None:
    check_op(op, dtype)


def test_check_op_refuses_the_documented_pairs() -> None:
    refused = {(op, dt.kind) for op, dt in INVALID}

    assert refused == ({(op, k) for op in BITWISE for k in "fc"}
                       | {(ReduceOp.MIN, "c"), (ReduceOp.MAX, "c")}
                       | {(ReduceOp.AVG, k) for k in "biu"})


@pytest.mark.parametrize("op, dtype", INVALID, ids=_ids)
def test_check_op_refuses_invalid_pairs_naming_op_and_dtype(op: ReduceOp,
                                                            dtype: np.dtype) -> None:
    with pytest.raises(ConfigurationError) as info:
        check_op(op, dtype)

    message = str(info.value)
    assert op.name in message
    assert str(dtype) in message


@pytest.mark.parametrize("dtype", FLOATS + COMPLEX, ids=str)
@pytest.mark.parametrize("op", BITWISE, ids=str)
def test_bitwise_ops_on_float_or_complex_ask_for_integer_or_bool(op: ReduceOp,
                                                                 dtype: np.dtype) -> None:
    with pytest.raises(ConfigurationError, match="integer or bool"):
        check_op(op, dtype)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("op", [ReduceOp.MIN, ReduceOp.MAX], ids=str)
def test_min_max_on_complex_are_refused(op: ReduceOp, dtype: np.dtype) -> None:
    with pytest.raises(ConfigurationError, match="complex"):
        check_op(op, dtype)


@pytest.mark.parametrize("dtype", BOOL + INTS + UINTS, ids=str)
def test_avg_on_integer_or_bool_asks_for_floating(dtype: np.dtype) -> None:
    with pytest.raises(ConfigurationError, match="floating or complex"):
        check_op(ReduceOp.AVG, dtype)


def test_check_op_accepts_dtype_specs_as_well_as_dtypes() -> None:
    check_op(ReduceOp.BAND, np.int32)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        check_op(ReduceOp.BAND, np.float32)  # type: ignore[arg-type]


# -- reduce_into / finish against numpy -------------------------------------------------

WORLD = 3


def _inputs(dtype: np.dtype, n: int = 17) -> list[np.ndarray]:
    # Small integers (complex: small integer parts) keep every result exact, so the
    # order of combination cannot matter and equality is bitwise.
    rng = np.random.default_rng(zlib.crc32(str(dtype).encode()))
    arrays = []
    for _ in range(WORLD):
        if dtype.kind == "b":
            arrays.append(rng.integers(0, 2, n).astype(bool))
        elif dtype.kind == "u":
            arrays.append(rng.integers(0, 6, n).astype(dtype))
        elif dtype.kind == "c":
            arrays.append((rng.integers(-5, 6, n) + 1j * rng.integers(-5, 6, n)).astype(dtype))
        else:
            arrays.append(rng.integers(-5, 6, n).astype(dtype))
    return arrays


def _oracle(op: ReduceOp, arrays: list[np.ndarray]) -> np.ndarray:
    stack = np.stack(arrays)
    dtype = arrays[0].dtype
    if dtype.kind == "b":
        logical: dict[ReduceOp, Callable[..., Any]] = {
            ReduceOp.SUM: np.any, ReduceOp.PRODUCT: np.all, ReduceOp.MIN: np.all,
            ReduceOp.MAX: np.any, ReduceOp.BAND: np.all, ReduceOp.BOR: np.any,
            ReduceOp.BXOR: lambda s, axis: s.sum(axis=axis) % 2 == 1}
        return np.asarray(logical[op](stack, axis=0), dtype=bool)
    exact: dict[ReduceOp, Callable[[np.ndarray], Any]] = {
             ReduceOp.SUM: lambda s: s.sum(axis=0, dtype=dtype),
             ReduceOp.PRODUCT: lambda s: s.prod(axis=0, dtype=dtype),
             ReduceOp.MIN: lambda s: s.min(axis=0),
             ReduceOp.MAX: lambda s: s.max(axis=0),
             ReduceOp.BAND: lambda s: np.bitwise_and.reduce(s, axis=0),
             ReduceOp.BOR: lambda s: np.bitwise_or.reduce(s, axis=0),
             ReduceOp.BXOR: lambda s: np.bitwise_xor.reduce(s, axis=0),
             ReduceOp.AVG: lambda s: s.astype(np.complex128 if dtype.kind == "c"
                                              else np.float64).mean(axis=0)}
    result: np.ndarray = np.asarray(exact[op](stack))
    return result


def _reduce(op: ReduceOp, arrays: list[np.ndarray]) -> np.ndarray:
    acc: np.ndarray = arrays[0].copy()
    for incoming in arrays[1:]:
        reduce_into(op, acc, incoming)
    finish(op, acc, len(arrays))
    return acc


@pytest.mark.parametrize("op, dtype", VALID, ids=_ids)
def test_reduce_into_then_finish_matches_numpy(op: ReduceOp, dtype: np.dtype) -> None:
    arrays = _inputs(dtype)
    originals = [a.copy() for a in arrays]

    result = _reduce(op, arrays)

    assert result.dtype == dtype
    expected = _oracle(op, originals)
    if op is ReduceOp.AVG:
        rtol = 1e-3 if dtype in (np.float16, np.complex64) else 1e-6
        np.testing.assert_allclose(result, expected, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(result, expected)
    for array, original in zip(arrays[1:], originals[1:]):
        np.testing.assert_array_equal(array, original)  # incoming is never written


def test_reduce_into_writes_into_the_accumulator_in_place() -> None:
    acc = np.array([1, 2, 3], dtype=np.int32)
    view = acc[:]

    reduce_into(ReduceOp.SUM, acc, np.array([10, 20, 30], dtype=np.int32))

    np.testing.assert_array_equal(view, [11, 22, 33])


def test_bool_sum_is_logical_or_and_product_logical_and() -> None:
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])

    total = a.copy()
    reduce_into(ReduceOp.SUM, total, b)
    product = a.copy()
    reduce_into(ReduceOp.PRODUCT, product, b)

    np.testing.assert_array_equal(total, [False, True, True, True])
    np.testing.assert_array_equal(product, [False, False, False, True])
    assert total.dtype == product.dtype == np.bool_


@pytest.mark.parametrize("dtype", FLOATS + COMPLEX, ids=str)
def test_avg_finish_divides_by_the_group_size(dtype: np.dtype) -> None:
    acc = np.array([4, 8, -12, 0], dtype=dtype)

    finish(ReduceOp.AVG, acc, 4)

    np.testing.assert_array_equal(acc, np.array([1, 2, -3, 0], dtype=dtype))
    assert acc.dtype == dtype


def test_avg_finish_on_an_empty_array_is_a_no_op() -> None:
    acc = np.zeros(0, dtype=np.float32)

    finish(ReduceOp.AVG, acc, 3)

    assert acc.shape == (0,)


@pytest.mark.parametrize("op", [op for op in ReduceOp if op is not ReduceOp.AVG], ids=str)
def test_finish_leaves_non_avg_results_alone(op: ReduceOp) -> None:
    acc = np.array([3, 5, 7], dtype=np.int64)

    finish(op, acc, 4)

    np.testing.assert_array_equal(acc, [3, 5, 7])


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MIN], ids=str)
def test_reduction_over_a_single_rank_is_its_own_array(op: ReduceOp) -> None:
    only = _inputs(np.dtype(np.float32))[0]

    np.testing.assert_array_equal(_reduce(op, [only.copy()]), only)


_NAN = {np.float16: (np.uint16, 0x7E00), np.float32: (np.uint32, 0x7FC00000),
        np.float64: (np.uint64, 0x7FF8000000000000)}


def _nans(dtype, payload: int, count: int) -> np.ndarray:
    """``count`` quiet NaNs of ``dtype`` carrying ``payload``."""
    unsigned, quiet = _NAN[dtype]
    array = np.zeros(count, dtype)
    array.view(unsigned)[:] = quiet | payload
    return array


@pytest.mark.parametrize("dtype", list(_NAN))
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX])
@pytest.mark.parametrize("count", [1, 2, 3, 17, 1000])
def test_combine_gives_the_same_bits_into_either_operand_or_a_third_array(dtype, op, count):
    """Recursive doubling's pair members write into different operands (the lower
    one into the first, the higher into the second): both must get one NaN."""
    results = []
    for into in ("first", "second", "apart"):
        first, second = _nans(dtype, 1, count), _nans(dtype, 2, count)
        out = {"first": first, "second": second, "apart": np.empty(count, dtype)}[into]
        combine(op, first, second, out)
        results.append(out.tobytes())
    assert results[0] == results[1] == results[2]
