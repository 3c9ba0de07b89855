"""The arena's collectives, members as threads over one anonymous mapping.

Threads share the mapping as processes share a /dev/shm segment; what is
tested is the protocol: slots, phases, fingerprints, deadlines and the
failure check, against a numpy oracle reduced in member order.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from asyncoll import _native
from asyncoll._algorithms import arena as collectives
from asyncoll._algorithms.arena import all_reduce as arena_all_reduce
from asyncoll._native.contract import PUBLISHED
from asyncoll._transport.shm import futex
from asyncoll._transport.shm.arena import (
    Arena,
    ArenaExpired,
    ArenaStillMapped,
    Waiter,
    arena_bytes,
)
from asyncoll._wire.frames import Fingerprint, Operation
from asyncoll.errors import MismatchError, PeerLostError
from asyncoll.types import ReduceOp

pytestmark = pytest.mark.timeout(60)


#: Which kernels the members run: every member the pure-Python path, every member the
#: compiled steps (asyncoll._native), or both in one arena (even members Python).
KERNELS = ["python", "native", "mixed"]


@pytest.fixture(autouse=True, params=KERNELS)
def kernels(request, monkeypatch):
    if request.param != "python" and _native.arena is None:
        pytest.skip(f"the compiled extension is off: {_native.describe()}")
    monkeypatch.setattr(sys.modules[__name__], "_KERNELS", request.param)
    return request.param


_KERNELS = "python"


def members(size: int, slot_bytes: int) -> list[Arena]:
    memory = mmap.mmap(-1, arena_bytes(size, slot_bytes))
    arenas = [Arena(memory, size, me, slot_bytes) for me in range(size)]
    for arena in arenas:
        if _KERNELS == "python" or (_KERNELS == "mixed" and arena.me % 2 == 0):
            arena.core = None
    return arenas


def run(size: int, body, slot_bytes: int = 1 << 16) -> list[object]:
    """Run ``body(arena)`` on ``size`` threads; return results (or errors) by member."""
    arenas = members(size, slot_bytes)
    results: list[object] = [None] * size

    def one(me: int) -> None:
        try:
            results[me] = body(arenas[me])
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            results[me] = exc

    threads = [threading.Thread(target=one, args=(me,)) for me in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a member is stuck"
    return results


def waiter(seconds: float = 20.0, check=lambda: None, arena: Arena | None = None) -> Waiter:
    """A waiter; given ``arena``, one that never spins and sleeps on its futexes (and
    waits briefly in C first, as a group's does, where the arena has compiled steps)."""
    if arena is None:
        return Waiter(time.monotonic() + seconds, lambda poll: check())
    brief = arena.core.wait if arena.core is not None else None
    return Waiter(time.monotonic() + seconds, lambda poll: check(), 0, arena.rest, brief)


def fingerprint(data: np.ndarray, op: ReduceOp) -> Fingerprint:
    return Fingerprint(Operation.ALL_REDUCE, 1, op.value + 1, 0, -1, data.size)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("size, count", [(1, 5), (2, 1), (3, 1000), (4, 7), (5, 0)])
def test_all_reduce_matches_numpy_bit_for_bit_over_several_operations(size, count, split):
    rng = np.random.default_rng(size * 100 + count)
    inputs = [[rng.standard_normal(count).astype(np.float32) for _ in range(size)]
              for _ in range(3)]

    def body(arena):
        out = []
        for k, per_member in enumerate(inputs, start=1):
            data = per_member[arena.me].copy()
            arena_all_reduce(arena, k, data, ReduceOp.SUM, fingerprint(data, ReduceOp.SUM),
                             waiter(), split)
            out.append(data)
        return out

    results = run(size, body)
    for k, per_member in enumerate(inputs):
        expected = per_member[0].copy()
        for other in per_member[1:]:
            expected += other
        for member in range(size):
            if split:  # each chunk reduced once, in member order: the same bits everywhere
                np.testing.assert_allclose(results[member][k], expected, rtol=1e-6)
                assert results[member][k].tobytes() == results[0][k].tobytes()
            else:
                assert results[member][k].tobytes() == expected.tobytes()


@pytest.mark.parametrize("op, expected", [(ReduceOp.MAX, 3.0), (ReduceOp.MIN, 0.0),
                                          (ReduceOp.AVG, 1.5), (ReduceOp.PRODUCT, 0.0)])
def test_every_reduce_op(op, expected):
    def body(arena):
        data = np.full(10, float(arena.me))
        arena_all_reduce(arena, 1, data, op, fingerprint(data, op), waiter(), True)
        return data

    assert all((r == expected).all() for r in run(4, body))


def test_members_calling_different_operations_raise_mismatch_before_reading():
    def body(arena):
        data = np.ones(4 + arena.me % 2, dtype=np.float32)  # member 1 has 5 elements
        arena_all_reduce(arena, 1, data, ReduceOp.SUM, fingerprint(data, ReduceOp.SUM),
                         waiter(), False)
        return data

    errors = run(2, body)
    assert all(isinstance(error, MismatchError) for error in errors), errors
    assert "element count: 4 on rank 0, 5 on rank 1" in str(errors[0])
    assert "element count: 5 on rank 1, 4 on rank 0" in str(errors[1])


def test_a_member_that_never_comes_expires_the_others_deadline():
    def body(arena):
        if arena.me == 2:
            return None
        data = np.ones(3)
        arena_all_reduce(arena, 1, data, ReduceOp.SUM, fingerprint(data, ReduceOp.SUM),
                         waiter(0.3), False)
        return data

    results = run(3, body)
    assert isinstance(results[0], ArenaExpired) and isinstance(results[1], ArenaExpired)


def test_the_failure_check_ends_a_wait_long_before_its_deadline():
    lost = PeerLostError("rank 1 on host h was lost", rank=1)

    def check():
        raise lost

    def body(arena):
        if arena.me == 1:
            return None
        data = np.ones(3)
        # The deadline is far past the test's own timeout: only the check can end this.
        arena_all_reduce(arena, 1, data, ReduceOp.SUM, fingerprint(data, ReduceOp.SUM),
                         waiter(3600, check), False)
        return data

    assert run(2, body)[0] is lost


@pytest.mark.parametrize("sleeping", [False, True], ids=["spinning", "sleeping"])
def test_members_racing_ahead_never_disturb_one_still_reading_an_operation_before(sleeping):
    # Operations alternate between two slot (and fingerprint) sets, so a member
    # may publish operation k + 1 while another still reads operation k: here
    # members sleep at random between 60 operations of four kinds, whose
    # fingerprints and sizes differ, and every result must still be right.
    # "sleeping": waits go straight to the futex sleep that publishes wake.
    size, count = 4, 257
    kinds = ["all_reduce", "broadcast", "all_gather", "reduce_scatter"]

    def body(arena):
        rng = np.random.default_rng(arena.me)
        wrong = []

        def paced() -> Waiter:
            return waiter(arena=arena if sleeping else None)

        for k in range(1, 61):
            kind = kinds[k % 4]
            if rng.random() < 0.3:
                time.sleep(rng.random() * 0.002)
            mine = np.full(count + k, arena.me + k, np.float64)
            fp = Fingerprint(Operation.ALL_REDUCE + k % 4, 1, 1, 0, -1, count + k)
            if kind == "all_reduce":
                collectives.all_reduce(arena, k, mine, ReduceOp.SUM, fp, paced(), k % 3 == 0)
                right = (mine == sum(m + k for m in range(size))).all()
            elif kind == "broadcast":
                collectives.broadcast(arena, k, mine, k % size, fp, paced())
                right = (mine == k % size + k).all()
            elif kind == "all_gather":
                outputs = [np.zeros(count + k) for _ in range(size)]
                collectives.all_gather(arena, k, mine, outputs, fp, paced())
                right = all((o == m + k).all() for m, o in enumerate(outputs))
            else:
                blocks = [np.full(3, arena.me + k + 10.0 * j) for j in range(size)]
                out = np.zeros(3)
                collectives.reduce_scatter(arena, k, blocks, out, ReduceOp.SUM, fp, paced())
                right = (out == sum(m + k + 10.0 * arena.me for m in range(size))).all()
            if not right:
                wrong.append((k, kind))
        return wrong

    assert run(size, body, slot_bytes=1 << 13) == [[]] * size


@pytest.mark.skipif(not futex.AVAILABLE, reason="futexes are Linux's")
def test_a_sleeping_member_is_woken_by_the_publish_it_waits_for():
    # The sleeper's steps are an hour long: only the publish's wake ends them
    # before the test's own timeout.
    arenas = members(2, 64)
    slept = threading.Event()

    def sleeper() -> None:
        ready = arenas[0].all_at_least(PUBLISHED, 1)
        slept.set()
        Waiter(time.monotonic() + 7200, lambda poll: None, 0, rest_hour(arenas[0])).until(ready)

    thread = threading.Thread(target=sleeper)
    thread.start()
    slept.wait(10)
    arenas[0].publish(1, Fingerprint(Operation.BARRIER))
    while thread.is_alive() and not arenas[0].sleeping(0):
        time.sleep(0.001)  # until it sleeps, so the wake (not a poll) is what ends it
    arenas[1].publish(1, Fingerprint(Operation.BARRIER))
    thread.join(30)
    assert not thread.is_alive(), "the publish did not wake the sleeping member"


@pytest.mark.skipif(not futex.AVAILABLE, reason="futexes are Linux's")
def test_a_futex_wait_returns_at_once_when_the_word_already_changed():
    memory = mmap.mmap(-1, 4096)
    address = np.frombuffer(memory, np.uint8).ctypes.data
    words = memoryview(memory).cast("q")
    words[0] = 5 + (7 << 32)  # the high half is not what the kernel compares
    finished = threading.Event()
    thread = threading.Thread(target=lambda: (futex.wait(address, 4, 3600), finished.set()))
    thread.start()
    thread.join(30)
    assert finished.is_set()
    words.release()


def rest_hour(arena: Arena):
    """Arena.rest with every step an hour long."""
    return lambda ready, seconds: arena.rest(ready, 3600.0)


def test_reduce_changes_only_the_root_and_barrier_waits_for_every_member():
    arrived = []

    def body(arena):
        data = np.full(5, arena.me + 1.0)
        fp = Fingerprint(Operation.REDUCE, 1, 1, 0, 2, 5)
        collectives.reduce(arena, 1, data, ReduceOp.SUM, 2, fp, waiter())
        time.sleep(0.05 * arena.me)
        arrived.append(arena.me)
        collectives.barrier(arena, 2, Fingerprint(Operation.BARRIER), waiter())
        return data[0], len(arrived)

    results = run(3, body)
    assert [r[0] for r in results] == [1.0, 2.0, 6.0]
    assert [r[1] for r in results] == [3, 3, 3]


# -- arrays larger than a piece: one operation number per piece -----------------------------

#: A slot this small cuts the tests' arrays into many pieces (the piece is at most a slot).
SMALL_SLOT = 256


def test_pieces_cut_a_range_into_runs_of_at_most_the_piece():
    assert collectives.pieces(0, 4) == [(0, 0)]
    assert collectives.pieces(4, 4) == [(0, 4)]
    assert collectives.pieces(10, 4) == [(0, 4), (4, 8), (8, 10)]


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.complex128])
def test_a_copy_larger_than_a_copy_block_copies_every_element(dtype):
    block = collectives.COPY_BLOCK_BYTES // np.dtype(dtype).itemsize
    for count in (0, 1, block, block + 1, 3 * block - 1):
        source = np.arange(count).astype(dtype)
        to = np.zeros(count, dtype=dtype)
        collectives.copy(to, source)
        assert to.tobytes() == source.tobytes(), count
    # Not 1-D: one assignment, as numpy broadcasts it.
    grid = np.zeros((2, block), dtype=dtype)
    collectives.copy(grid, np.arange(block).astype(dtype))
    assert (grid == np.arange(block).astype(dtype)).all()


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_an_all_reduce_larger_than_the_slot_goes_in_pieces_bit_identical(size, op):
    # 1001 float32 over 256-byte slots: 16 pieces, the last one short.
    rng = np.random.default_rng(size)
    inputs = [rng.standard_normal(1001).astype(np.float32) for _ in range(size)]

    def body(arena):
        data = inputs[arena.me].copy()
        last = arena_all_reduce(arena, 1, data, op, fingerprint(data, op), waiter(), True)
        # The next operation follows the last piece's number, on every member alike.
        token = np.full(1, float(arena.me), dtype=np.float32)
        after = arena_all_reduce(arena, last + 1, token, ReduceOp.SUM,
                                 fingerprint(token, ReduceOp.SUM), waiter(), False)
        return data, last, after, token[0]

    results = run(size, body, SMALL_SLOT)
    pieces = -(-1001 * 4 // SMALL_SLOT)
    assert {(r[1], r[2], r[3]) for r in results} == {(pieces, pieces + 1, sum(range(size)))}
    oracle = {ReduceOp.SUM: np.sum, ReduceOp.AVG: np.mean, ReduceOp.MAX: np.max}[op]
    for data, *_ in results:
        np.testing.assert_allclose(data, oracle(np.stack(inputs), axis=0), rtol=1e-5)
        assert data.tobytes() == results[0][0].tobytes()


def test_broadcast_reduce_and_all_gather_in_pieces_match_numpy():
    size, count = 3, 300  # 300 float64 = 2400 bytes: 10 pieces of a 256-byte slot

    def body(arena):
        me = arena.me
        mine = np.arange(count, dtype=np.float64) * (me + 1)
        copied = mine.copy() if me == 1 else np.zeros(count)
        numbers = [collectives.broadcast(arena, 1, copied, 1, Fingerprint(
            Operation.BROADCAST, 1, 0, 0, 1, count), waiter())]
        reduced = mine.copy()
        numbers.append(collectives.reduce(arena, numbers[-1] + 1, reduced, ReduceOp.SUM, 0,
                                          Fingerprint(Operation.REDUCE, 1, 1, 0, 0, count),
                                          waiter()))
        # Blocks of different sizes: member j gives count - 100 * j elements.
        block = mine[:count - 100 * me].copy()
        outputs = [np.zeros(count - 100 * j) for j in range(size)]
        numbers.append(collectives.all_gather(arena, numbers[-1] + 1, block, outputs,
                                              Fingerprint(Operation.ALL_GATHER), waiter()))
        return copied, reduced, outputs, numbers

    results = run(size, body, SMALL_SLOT)
    base = np.arange(count, dtype=np.float64)
    assert len({tuple(r[3]) for r in results}) == 1
    assert results[0][3][0] == 1 + 10 - 1  # 10 pieces from operation 1
    for me, (copied, reduced, outputs, _) in enumerate(results):
        np.testing.assert_array_equal(copied, base * 2)
        # Only the root's array changes in reduce.
        np.testing.assert_array_equal(reduced, base * 6 if me == 0 else base * (me + 1))
        for j, out in enumerate(outputs):
            np.testing.assert_array_equal(out, (base * (j + 1))[:count - 100 * j])


def test_reduce_scatter_in_pieces_reduces_each_block_into_its_member():
    size, blocks = 4, [70, 70, 70, 69]  # 279 float32 over 256-byte slots: 16 elements a block

    def body(arena):
        me = arena.me
        inputs = [np.arange(n, dtype=np.float32) + 1000 * me + 100 * j
                  for j, n in enumerate(blocks)]
        output = np.zeros(blocks[me], dtype=np.float32)
        last = collectives.reduce_scatter(arena, 1, inputs, output, ReduceOp.SUM,
                                          Fingerprint(Operation.REDUCE_SCATTER), waiter())
        return output, last

    results = run(size, body, SMALL_SLOT)
    assert {r[1] for r in results} == {-(-70 // (SMALL_SLOT // 4 // size))}
    for me, (output, _) in enumerate(results):
        expected = sum(np.arange(blocks[me], dtype=np.float32) + 1000 * m + 100 * me
                       for m in range(size))
        np.testing.assert_array_equal(output, expected)


def test_members_with_arrays_of_different_sizes_in_pieces_raise_mismatch():
    def body(arena):
        data = np.ones(1000 + arena.me, dtype=np.float32)
        arena_all_reduce(arena, 1, data, ReduceOp.SUM, fingerprint(data, ReduceOp.SUM),
                         waiter(), True)

    errors = run(2, body, SMALL_SLOT)
    assert all(isinstance(error, MismatchError) for error in errors), errors
    assert "element count: 1000 on rank 0, 1001 on rank 1" in str(errors[0])


def test_a_member_that_stops_between_pieces_expires_the_others_deadline():
    def body(arena):
        data = np.ones(1000, dtype=np.float32)
        if arena.me == 1:
            data = data[:64]  # one piece only, then gone
        arena_all_reduce(arena, 1, data, ReduceOp.SUM,
                         fingerprint(np.ones(1000, np.float32), ReduceOp.SUM), waiter(0.3),
                         True)

    results = run(2, body, SMALL_SLOT)
    assert isinstance(results[0], ArenaExpired) and results[0].behind == [1]


@pytest.mark.parametrize("sleeping", [False, True])
def test_members_racing_through_pieces_never_disturb_one_still_reading(sleeping):
    # As above, with every array in pieces (a 256-byte slot), each piece an
    # operation number: a member that sleeps at random must still never see
    # another's later fingerprint or data, and every member must number the
    # pieces alike.
    size, count = 4, 300
    kinds = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "broadcast"]

    def body(arena):
        rng = np.random.default_rng(arena.me + 10)
        wrong = []
        number = 1
        for k in range(1, 51):
            kind = kinds[k % len(kinds)]
            if rng.random() < 0.3:
                time.sleep(rng.random() * 0.002)
            paced = waiter(arena=arena if sleeping else None)
            mine = np.full(count + k, arena.me + k, np.float64)
            fp = Fingerprint(Operation.ALL_REDUCE + k % 4, 1, 1, 0, -1, count + k)
            if kind == "all_reduce":
                last = collectives.all_reduce(arena, number, mine, ReduceOp.SUM, fp, paced, True)
                right = (mine == sum(m + k for m in range(size))).all()
            elif kind == "broadcast":
                last = collectives.broadcast(arena, number, mine, k % size, fp, paced)
                right = (mine == k % size + k).all()
            elif kind == "all_gather":
                outputs = [np.zeros(count + k) for _ in range(size)]
                last = collectives.all_gather(arena, number, mine, outputs, fp, paced)
                right = all((o == m + k).all() for m, o in enumerate(outputs))
            else:
                blocks = [np.full(40, arena.me + k + 10.0 * j) for j in range(size)]
                out = np.zeros(40)
                last = collectives.reduce_scatter(arena, number, blocks, out, ReduceOp.SUM, fp,
                                                  paced)
                right = (out == sum(m + k + 10.0 * arena.me for m in range(size))).all()
            if not right:
                wrong.append((k, kind))
            number = last + 1
        return wrong

    assert run(size, body, SMALL_SLOT) == [[]] * size


#: One member of test_members_on_one_processor_sleep_..., in a process of its own: pinned
#: to the processor given, it meets the other member through the arena file given, once
#: to start together and then ``operations`` times, and prints how often it slept.
_MEMBER = """
import mmap, os, resource, sys, time
from asyncoll import _native
from asyncoll._native.contract import WAITING
from asyncoll._transport.shm.arena import SPINS
from asyncoll._wire.frames import Fingerprint

path, me, processor, operations = sys.argv[1], *map(int, sys.argv[2:])
os.sched_setaffinity(0, {processor})
with open(path, "r+b") as file:
    memory = mmap.mmap(file.fileno(), 0)
core = _native.arena.Core(memory, 2, me, 4096)
fingerprint = Fingerprint(9, 0, 0, 1, -1, 0)
# A deadline of the members' own, shorter than the test's.
deadline = time.monotonic() + 30
before = 0
for operation in range(1, operations + 2):
    while core.barrier(None, operation, fingerprint, SPINS) == WAITING:
        assert time.monotonic() < deadline, f"member {me} waited 30 s at {operation}"
    if operation == 1:  # both have started: count from here
        before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
print(resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before)
"""


@pytest.mark.scheduler
@pytest.mark.skipif(_native.arena is None or not hasattr(os, "sched_setaffinity"),
                    reason="the compiled wait, on Linux")
def test_members_on_one_processor_sleep_for_each_other_rather_than_spin_and_yield(tmp_path):
    # Two processes of one job often start on one processor. There, a member that
    # waits for the other sleeps (until the other publishes: it is woken, and the
    # scheduler may place it on an idle processor), where spinning only kept the
    # processor from the other and yielding kept the two together, every operation
    # costing two switches. Pinned to one processor, the member that comes first to
    # each operation sleeps. Which one that is may settle: the sleeper, woken, preempts
    # the member that woke it, publishes the next operation and sleeps again, so the
    # other finds it published and never waits. So the two are counted together.
    # Each member is a fresh process (not forked from this threaded one), and counts
    # only after a first barrier: its start-up, and the wait for the other's, are not
    # counted.
    path = tmp_path / "arena"
    path.write_bytes(bytes(arena_bytes(2, 4096)))
    operations = 300
    processor = min(os.sched_getaffinity(0))
    members = [subprocess.Popen([sys.executable, "-c", _MEMBER, str(path), str(me),
                                 str(processor), str(operations)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for me in range(2)]
    deadline = time.monotonic() + 45
    outs = []
    try:
        for member in members:
            outs.append(member.communicate(timeout=max(0.1, deadline - time.monotonic())))
    finally:
        for member in members:
            member.kill()
            member.wait()
    assert [member.returncode for member in members] == [0, 0], outs
    slept = [int(out) for out, _ in outs]
    # Spinning and yielding switch with no sleep (a yield is counted as involuntary).
    assert sum(slept) > operations // 2, slept


def _step(arena: Arena, data: np.ndarray) -> collectives._Step:
    return collectives._Step(arena, 1, fingerprint(data, ReduceOp.SUM), waiter(5))


def test_close_unmaps_the_segment_though_a_kept_all_reduce_took_views_of_its_slots():
    arena = members(1, 1 << 12)[0]
    kept = collectives.AllReduce(ReduceOp.SUM, np.dtype(np.float64), 8, False)
    data = np.arange(8.0)
    kept.run(_step(arena, data), data)  # looks its slots up once, and keeps them
    assert np.array_equal(data, np.arange(8.0))

    arena.close()

    assert arena.closed
    arena.close()  # twice is harmless


def test_close_says_so_when_a_view_of_the_slots_is_still_held_and_unmaps_once_it_goes():
    arena = members(1, 1 << 12)[0]
    held = arena.slots(1, np.dtype(np.int32), 4)[0]

    with pytest.raises(ArenaStillMapped, match="still held"):
        arena.close()

    assert not arena.closed
    del held
    arena.close()
    assert arena.closed


def test_a_member_that_gave_up_tells_the_others_whom_it_waited_for_and_how_long():
    arenas = members(3, 1024)
    assert arenas[0].abandoned() is None
    arenas[2].abandon(5, 7, 1, 3000)
    assert arenas[0].abandoned() == (2, 5, 7, 1, 3000)
