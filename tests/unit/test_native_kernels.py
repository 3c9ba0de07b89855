"""The compiled extension's reductions and its bounds (asyncoll/_native/reduce.c, steps.c).

Every reduction the extension has must give numpy's bits for the same operands
in the same order: NaNs and their payloads, signed zeros, wrapping integers,
float16 rounding. A member running C and one running numpy then agree.
"""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncoll import _native
from asyncoll._algorithms import arena_steps
from asyncoll._transport.shm.arena import arena_bytes
from asyncoll._wire.frames import Fingerprint
from asyncoll.types import ReduceOp

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(_native.arena is None,
                                 reason=f"the compiled extension is off: {_native.describe()}")]

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]
UFUNCS = {ReduceOp.SUM: np.add, ReduceOp.AVG: np.add, ReduceOp.PRODUCT: np.multiply,
          ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum, ReduceOp.BAND: np.bitwise_and,
          ReduceOp.BOR: np.bitwise_or, ReduceOp.BXOR: np.bitwise_xor}
PAIRS = [(dtype, op) for dtype in DTYPES for op in ReduceOp
         if _native.kind(np.dtype(dtype), op) is not None]


def numpy_reduce(parts: list[np.ndarray], op: ReduceOp, members: int) -> np.ndarray:
    """What the pure-Python path computes: parts in order, then AVG's divide."""
    ufunc = UFUNCS[op]
    with np.errstate(all="ignore"):
        return _numpy_reduce(ufunc, parts, op, members)


def _numpy_reduce(ufunc, parts, op, members):
    out = parts[0].copy() if len(parts) == 1 else ufunc(parts[0], parts[1])
    for part in parts[2:]:
        ufunc(out, part, out=out)
    if op is ReduceOp.AVG:
        np.divide(out, members, out=out, casting="unsafe")
    return out


def test_the_extension_has_every_op_of_every_real_dtype_and_complex_sums():
    have = {(dtype, op) for dtype, op in PAIRS}
    for dtype in DTYPES[:9]:  # bool and the integers: every op but AVG
        assert {op for d, op in have if d == dtype} == set(ReduceOp) - {ReduceOp.AVG}
    for dtype in ("float16", "float32", "float64"):
        assert {op for d, op in have if d == dtype} == {
            ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX}
    # numpy's complex products and divisions round differently in its vector loops.
    assert {op for d, op in have if d.startswith("complex")} == {ReduceOp.SUM}


def bits(draw, dtype: np.dtype, count: int) -> np.ndarray:
    """``count`` items of any bit pattern (NaN payloads, subnormals, signed zeros)."""
    raw = draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
    array = np.frombuffer(raw, dtype=np.uint8).copy().view(dtype)
    if dtype.kind == "b":
        array = array.view(np.uint8) & 1  # numpy's bools are 0 or 1
        return array.view(dtype)
    return array


@st.composite
def reductions(draw):
    dtype, op = draw(st.sampled_from(PAIRS))
    dtype = np.dtype(dtype)
    count = draw(st.integers(0, 70))
    members = draw(st.integers(1, 6))
    parts = [bits(draw, dtype, count) for _ in range(members)]
    offset = draw(st.integers(0, 15))
    return dtype, op, parts, members, offset


@settings(max_examples=600, deadline=None)
@given(reductions())
def test_every_reduction_gives_numpys_bits(case):
    dtype, op, parts, members, offset = case
    expected = numpy_reduce(parts, op, members)
    # The output at any byte offset: aligned for its items or not.
    storage = np.zeros(expected.nbytes + 16, dtype=np.uint8)
    out = storage[offset:offset + expected.nbytes].view(dtype)
    took = arena_steps.reduce_parts(out, parts, op, members)

    assert took == (offset % min(dtype.itemsize, 8) == 0 or expected.size == 0)
    if took:
        assert out.tobytes() == expected.tobytes()


def test_an_unaligned_output_is_refused_with_a_sentence_and_numpy_takes_it():
    parts = [np.arange(8, dtype=np.float64), np.ones(8)]
    out = np.zeros(8 * 8 + 1, dtype=np.uint8)[1:].view(np.float64)
    code = _native.kind(np.dtype(np.float64), ReduceOp.SUM)

    with pytest.raises(ValueError, match="not a whole number of aligned items of 8 bytes"):
        _native.arena.reduce(code, out, parts, 2)
    with pytest.raises(ValueError, match="part 1 has 16 bytes, the output 64"):
        _native.arena.reduce(code, np.zeros(8), [parts[0], np.ones(2)], 2)
    with pytest.raises(ValueError, match="kind 999 is not one"):
        _native.arena.reduce(999, np.zeros(8), parts, 2)


def core(size: int = 2, me: int = 0, slot: int = 1024):
    memory = mmap.mmap(-1, arena_bytes(size, slot))
    return memory, _native.arena.Core(memory, size, me, slot)


def test_a_core_checks_the_mapping_member_slot_root_and_operation_before_any_byte():
    memory = mmap.mmap(-1, arena_bytes(2, 1024))
    with pytest.raises(ValueError, match="cannot hold an arena of 2 members"):
        _native.arena.Core(memory, 2, 0, 4096)
    with pytest.raises(ValueError, match="cannot have member 2"):
        _native.arena.Core(memory, 2, 2, 1024)
    _, arena = core()
    fingerprint = Fingerprint(1, 1, 1, 0, -1, 1)
    code = _native.kind(np.dtype(np.float32), ReduceOp.SUM)
    with pytest.raises(ValueError, match="4096 bytes do not fit the arena's slots of 1024"):
        arena.all_reduce(np.zeros(1024, dtype=np.float32), 1, fingerprint, code, 0)
    with pytest.raises(ValueError, match="root 2 is not a member"):
        arena.broadcast(np.zeros(4), 1, fingerprint, 2, 0)
    with pytest.raises(ValueError, match="operation number 0 is out of range"):
        arena.barrier(None, 0, fingerprint, 0)
    with pytest.raises(TypeError, match="tuple of 6 integers"):
        arena.barrier(None, 1, (1, 2), 0)
    arena.release()
    with pytest.raises(ValueError, match="released"):
        arena.barrier(None, 1, fingerprint, 0)


def test_a_step_with_a_late_member_says_waiting_and_publishes_once():
    memory, first = core()
    second = _native.arena.Core(memory, 2, 1, 1024)
    fingerprint = Fingerprint(1, 1, 1, 0, -1, 4)
    code = _native.kind(np.dtype(np.float32), ReduceOp.SUM)
    a, b = np.full(4, 1.5, dtype=np.float32), np.full(4, 2.0, dtype=np.float32)

    assert first.all_reduce(a, 1, fingerprint, code, 10) == 1  # WAITING: b is not there
    assert second.all_reduce(b, 1, fingerprint, code, 10) == 0  # DONE
    assert first.all_reduce_out(a, 1, fingerprint, code) == 0
    assert a.tolist() == b.tolist() == [3.5] * 4
    other = Fingerprint(1, 1, 2, 0, -1, 4)
    assert first.barrier(None, 2, other, 0) == 1
    assert second.barrier(None, 2, fingerprint, 0) == 2  # MISMATCH
    assert not first.same(2, other)


def test_reduce_and_all_gather_steps_check_their_root_and_outputs_and_meet():
    memory, first = core()
    second = _native.arena.Core(memory, 2, 1, 1024)
    fingerprint = Fingerprint(1, 1, 1, 0, 0, 4)
    code = _native.kind(np.dtype(np.int32), ReduceOp.SUM)
    with pytest.raises(ValueError, match="root 5 is not a member"):
        first.reduce(np.zeros(4, dtype=np.int32), 1, fingerprint, code, 5, 0)
    with pytest.raises(ValueError, match="all_gather needs 2 outputs, one a member, not 1"):
        first.all_gather(np.zeros(2), [np.zeros(2)], 1, fingerprint, 0)

    a, b = np.arange(4, dtype=np.int32), np.full(4, 10, dtype=np.int32)
    assert first.reduce(a, 1, fingerprint, code, 0, 0) == 1  # WAITING for member 1
    assert second.reduce(b, 1, fingerprint, code, 0, 0) == 0  # not the root: done
    assert first.reduce_out(a, 1, fingerprint, code, 0) == 0
    assert a.tolist() == [10, 11, 12, 13] and b.tolist() == [10] * 4
    outputs = [[np.zeros(3), np.zeros(1)], [np.zeros(3), np.zeros(1)]]
    mine = [np.array([1.0, 2.0, 3.0]), np.array([4.0])]
    assert first.all_gather(mine[0], outputs[0], 2, fingerprint, 0) == 1
    assert second.all_gather(mine[1], outputs[1], 2, fingerprint, 0) == 0
    assert first.all_gather_out(mine[0], outputs[0], 2, fingerprint) == 0
    for member in outputs:
        assert [out.tolist() for out in member] == [[1.0, 2.0, 3.0], [4.0]]
