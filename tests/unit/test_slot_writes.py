"""How a member writes its slot in the split all_reduce: cached or streaming stores.

The compiled step streams its slot writes while its cached ones run slow beside its
reads (asyncoll/_native/copies.c). Either way the bytes are the same; these tests
check that, and the judgement itself from given times.
"""

from __future__ import annotations

import mmap
import threading
import time

import numpy as np
import pytest

from asyncoll import _native
from asyncoll._algorithms.arena import all_reduce as arena_all_reduce
from asyncoll._transport.shm.arena import Arena, Waiter, arena_bytes
from asyncoll._wire.frames import Fingerprint, Operation
from asyncoll.types import ReduceOp

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(_native.arena is None, reason="the compiled extension is off")]

KIB = 1 << 10
#: What each judged step's copies took, in ns for 256 KiB each way.
QUICK, SLOW, READ = 40_000, 400_000, 50_000


def all_reduce_on_threads(inputs: list[np.ndarray], modes: list[str], op: ReduceOp,
                          slot_bytes: int, rounds: int = 2) -> list[list[bytes]]:
    """Each member's result of ``rounds`` split all_reduces, member m writing as modes[m]."""
    size = len(inputs)
    memory = mmap.mmap(-1, arena_bytes(size, slot_bytes))
    arenas = [Arena(memory, size, me, slot_bytes) for me in range(size)]
    results: list[object] = [None] * size

    def one(arena: Arena) -> None:
        try:
            assert arena.core.slot_writes(modes[arena.me]) == modes[arena.me]
            out, operation = [], 1
            for _ in range(rounds):
                data = inputs[arena.me].copy()
                fingerprint = Fingerprint(Operation.ALL_REDUCE, 1, op.value + 1, 0, -1,
                                          data.size)
                waiter = Waiter(time.monotonic() + 20, lambda poll: None)
                operation = arena_all_reduce(arena, operation, data, op, fingerprint, waiter,
                                             True) + 1
                out.append(data.tobytes())
            assert arena.core.slot_writes() == modes[arena.me]
            results[arena.me] = out
        except Exception as exc:  # noqa: BLE001 - the test raises it below
            results[arena.me] = exc

    threads = [threading.Thread(target=one, args=(arena,)) for arena in arenas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a member is stuck"
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results  # type: ignore[return-value]


@pytest.mark.parametrize("dtype, op", [(np.float32, ReduceOp.SUM), (np.float64, ReduceOp.AVG),
                                       (np.int16, ReduceOp.MAX)])
@pytest.mark.parametrize("size", [2, 3, 4])
@pytest.mark.parametrize("count", [40_001, 150_003])
def test_streaming_writes_give_the_bits_cached_writes_give(dtype, op, size, count):
    # Odd counts: the members' chunks start off any 16-byte line; 150_003 items go
    # in pieces through 64 KiB slots. Members past the first two reduce on the stack.
    rng = np.random.default_rng(count + size)
    inputs = [(rng.standard_normal(count) * 100).astype(dtype) for _ in range(size)]
    cached = all_reduce_on_threads(inputs, ["cached"] * size, op, 64 * KIB)
    streaming = all_reduce_on_threads(inputs, ["streaming"] * size, op, 64 * KIB)
    mixed = all_reduce_on_threads(inputs, ["streaming", "cached"] * 2, op, 64 * KIB)
    assert streaming == cached
    assert mixed == cached
    oracle = {ReduceOp.SUM: np.sum, ReduceOp.AVG: np.mean, ReduceOp.MAX: np.max}[op]
    expected = oracle(np.stack(inputs).astype(np.float64), axis=0)
    got = np.frombuffer(cached[0][1], dtype=dtype)
    np.testing.assert_allclose(got, expected.astype(dtype), rtol=1e-4, atol=1e-2)
    assert all(len(set(r)) == 1 for r in zip(*cached)), "every member ends with one result"


@pytest.fixture
def core():
    memory = mmap.mmap(-1, arena_bytes(2, 1 << 20))
    arena = Arena(memory, 2, 0, 1 << 20)
    yield arena.core
    arena.close()


def step(core, written_ns: int, bytes_: int = 256 * KIB, read_ns: int = READ) -> str:
    return core.judge_step(written_ns, bytes_, read_ns, bytes_)


def test_three_slow_steps_in_a_row_turn_to_streaming_and_a_quick_one_starts_the_count_again(
        core):
    assert core.slot_writes() == "cached"
    assert [step(core, SLOW), step(core, SLOW), step(core, QUICK)] == ["cached"] * 3
    assert [step(core, SLOW), step(core, SLOW)] == ["cached"] * 2
    assert step(core, SLOW) == "streaming"


def test_a_streaming_member_writes_cached_once_in_64_steps_and_keeps_what_that_step_shows(core):
    for _ in range(3):
        step(core, SLOW)
    assert core.slot_writes() == "streaming"
    # Streaming steps note no cached time: only the probe, the 64th, is judged.
    assert {step(core, 0) for _ in range(63)} == {"streaming"}
    assert step(core, SLOW) == "streaming"
    assert {step(core, 0) for _ in range(63)} == {"streaming"}
    assert step(core, QUICK) == "cached"


def test_small_copies_and_fixed_modes_are_not_judged(core):
    for _ in range(5):
        assert step(core, SLOW, 32 * KIB) == "cached"
    assert core.slot_writes("cached") == "cached"
    for _ in range(5):
        assert step(core, SLOW) == "cached"
    assert core.slot_writes("streaming") == "streaming"
    for _ in range(200):
        assert step(core, QUICK) == "streaming"
    assert core.slot_writes("auto") == "cached"


def test_slot_writes_refuses_another_mode_with_a_sentence(core):
    with pytest.raises(ValueError,
                       match="takes \"auto\", \"cached\" or \"streaming\", not 'fast'"):
        core.slot_writes("fast")
    with pytest.raises(TypeError, match="at most one argument"):
        core.slot_writes("auto", "cached")
