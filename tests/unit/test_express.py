"""The compiled entry of repeated calls, alone (asyncoll/_native/express.c).

An Express on a two-member arena in one process, the other member driven
through its own compiled Core, and stand-ins for the runner, session and
fault table with the attributes Express reads and writes: what a finished
call leaves (as Runner.here would), every case it refuses having done
nothing, and what it hands to Runner.here when a member is late or differs.
The same entry in real jobs: tests/integration/test_arena_path.py (its
`express` mode, tests/integration/workers/arena_path.py).
"""

from __future__ import annotations

import gc
import itertools
import mmap
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from asyncoll import _native
from asyncoll._group.faults import Progress
from asyncoll._native.contract import ALL_REDUCE, BARRIER, MISMATCH, WAITING
from asyncoll._transport.inbox import EarlyCount
from asyncoll._transport.shm.arena import arena_bytes
from asyncoll._wire.frames import Fingerprint
from asyncoll.types import ReduceOp

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(_native.arena is None,
                                 reason=f"the compiled extension is off: {_native.describe()}")]

SLOT = 4096
GROUP = 7
SUM = ReduceOp.SUM
FP = Fingerprint(1, 2, 1, 1, -1, 4)
BARRIER_FP = Fingerprint(9, 0, 0, 1, -1, 0)


class Runner:
    """What Express reads of Runner, and a ``here`` that records what it is handed."""

    def __init__(self, recorder: Any = None) -> None:
        self.handed = self.finished = 0
        self._seq = 10
        self.recorder = recorder
        self.run_fingerprint: Any = None
        self.handed_over: list[tuple[Any, ...]] = []
        self.lock_held_then: list[bool] = []
        self.lock: Any = None

    def here(self, what, fingerprint, limit, kernel, arrays, started=0):
        assert self.lock is not None
        self.lock_held_then.append(self.lock.locked())
        self.handed_over.append((what, fingerprint, limit, kernel, arrays, started))
        return True


class Recorder:
    """Recorder's open_run, and its ring of samples (Express writes them itself)."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, ...]] = []
        self.sample_ring = ([None] * 3, itertools.count())

    def open_run(self, source, group_id, seq, what, fingerprint, path, limit):
        self.runs.append((group_id, seq, what, fingerprint, path, limit))
        source.run_fingerprint = fingerprint


def resume(step, started):
    raise AssertionError("Express calls Runner.here with this, never calls it itself")


@pytest.fixture
def job():
    """(express, the pieces it works on, the other member's Core)."""
    memory = mmap.mmap(-1, arena_bytes(2, SLOT))
    mine = _native.arena.Core(memory, 2, 0, SLOT)
    theirs = _native.arena.Core(memory, 2, 1, SLOT)
    early = EarlyCount()
    lock = _native.arena.PathLock()
    parts = SimpleNamespace(
        runner=Runner(), session=SimpleNamespace(closed=False), counter=counter(100),
        faults=SimpleNamespace(broken={}), progress=Progress(), early=early, lock=lock,
        step=SimpleNamespace(operation=0, waiter=SimpleNamespace(spins=50)), scans=[])
    parts.runner.lock = lock
    parts.mine = mine
    express = make(parts)
    express.arm(mine, parts.step, 50)
    yield express, parts, theirs
    mine.release()
    theirs.release()


def counter(operations: int) -> bytearray:
    """A session's compiled_ops, counted to ``operations``."""
    return bytearray(operations.to_bytes(8, sys.byteorder, signed=True))


def counted(parts: SimpleNamespace) -> int:
    return int.from_bytes(parts.counter, sys.byteorder, signed=True)


def make(parts: SimpleNamespace) -> Any:
    return _native.arena.Express(
        runner=parts.runner, session=parts.session, counter=parts.counter, faults=parts.faults,
        progress=parts.progress, early=parts.early,
        lock=parts.lock, group_id=GROUP, limit=30.0, ndarray=np.ndarray, sample_every=4,
        scan_soon=lambda: parts.scans.append(GROUP), path="arena")


def teach_sum(express: Any, dtype: str = "float32", count: int = 4) -> None:
    kind = _native.kind(np.dtype(dtype), SUM)
    assert express.learn(ALL_REDUCE, "all_reduce", FP, resume, np.dtype(dtype),
                         count * np.dtype(dtype).itemsize, SUM, kind)


def their_part(theirs: Any, operation: int, values: np.ndarray, fingerprint=FP) -> None:
    """The other member copies in and publishes ``operation`` (its step then waits)."""
    kind = _native.kind(values.dtype, SUM)
    assert theirs.all_reduce(values, operation, fingerprint, kind, 0) == WAITING


def test_a_taught_all_reduce_runs_whole_and_leaves_what_runner_here_would(job):
    express, parts, theirs = job
    teach_sum(express)
    assert express.count == 1
    for operation in (1, 2, 3):
        their_part(theirs, operation, np.full(4, 10.0 * operation, np.float32))
        x = np.arange(4, dtype=np.float32)
        assert express.all_reduce(x, SUM) is True
        assert (x == np.arange(4) + 10 * operation).all()
    seq = 13
    assert (parts.runner._seq, counted(parts), parts.step.operation) == (seq, 103, 3)
    progress = parts.progress
    assert (progress.completed, progress.last, progress.running) == (seq, (seq, FP), None)
    assert parts.runner.handed_over == [] and not parts.lock.locked() and parts.scans == []


class SlottedRunner(Runner):
    """Runner's fields in slots, as asyncoll._group.runner.Runner keeps them."""

    __slots__ = ("_seq", "handed", "finished", "run_fingerprint")


class WatchedRunner(SlottedRunner):
    """Slots behind a __setattr__ of its own, which every write must pass."""

    def __setattr__(self, name, value):
        self.__dict__.setdefault("written", []).append(name)
        object.__setattr__(self, name, value)


def armed(parts: SimpleNamespace, runner: Runner) -> Any:
    parts.runner = runner
    runner.lock = parts.lock
    express = make(parts)
    express.arm(parts.mine, parts.step, 50)
    teach_sum(express)
    return express


def test_fields_in_slots_are_read_and_written_there_and_any_other_way_is_the_protocols(job):
    _, parts, theirs = job
    express = armed(parts, SlottedRunner())
    assert sorted(express.in_slots) == ["_seq", "completed", "finished", "frames", "handed",
                                        "last", "run_fingerprint", "running"]
    their_part(theirs, 1, np.full(4, 2.0, np.float32))
    x = np.ones(4, np.float32)
    assert express.all_reduce(x, SUM) is True and (x == 3).all()
    assert (parts.runner._seq, counted(parts), parts.step.operation) == (11, 101, 1)
    del parts.runner._seq  # an empty slot reads as the attribute protocol says
    with pytest.raises(AttributeError, match="_seq"):
        express.all_reduce(x, SUM)
    watched = WatchedRunner()
    express = armed(parts, watched)
    assert sorted(express.in_slots) == ["completed", "frames", "last", "running"]
    their_part(theirs, 2, np.full(4, 2.0, np.float32))
    watched.__dict__["written"] = []
    assert express.all_reduce(x, SUM) is True and watched.__dict__["written"] == ["_seq"]


def test_a_late_member_hands_the_started_operation_to_runner_here_with_the_lock_held(job):
    express, parts, theirs = job
    teach_sum(express)
    x = np.ones(4, np.float32)
    assert express.all_reduce(x, SUM) is True
    [(what, fingerprint, limit, kernel, arrays, started)] = parts.runner.handed_over
    assert (what, fingerprint, limit, kernel, started) == ("all_reduce", FP, 30.0, resume, 1)
    assert arrays[0] is x and arrays[1] == WAITING
    assert parts.runner.lock_held_then == [True] and not parts.lock.locked()
    # Express numbered it and noted it running, as Runner.here does before a step; it
    # hands over operation 1, which the step's operation names too.
    assert (parts.runner._seq, counted(parts), parts.step.operation) == (11, 101, 1)
    assert (parts.progress.running, parts.progress.completed) == ((11, FP), 0)


def test_a_member_of_another_operation_is_handed_over_as_a_mismatch(job):
    express, parts, theirs = job
    teach_sum(express)
    their_part(theirs, 1, np.ones(4, np.float32), Fingerprint(1, 2, 1, 1, -1, 5))
    assert express.all_reduce(np.ones(4, np.float32), SUM) is True
    assert parts.runner.handed_over[0][4][1] == MISMATCH


def test_a_barrier_meets_and_compares_fingerprints(job):
    express, parts, theirs = job
    assert express.learn(BARRIER, "barrier", BARRIER_FP, resume, None, 0, None, -1)
    theirs.publish(1, BARRIER_FP)
    assert express.barrier() is True
    assert parts.runner.handed_over == [] and parts.step.operation == 1
    theirs.publish(3, FP)  # the other member's operation 2 is not a barrier
    assert express.barrier() is True
    assert parts.runner.handed_over[0][4] == (None, MISMATCH)


@pytest.mark.parametrize("why", [
    "loop_busy", "closed", "broken", "early_frames", "lock_taken",
    "other_op", "other_dtype", "other_size", "strided", "read_only", "subclass",
    "unaligned", "torn_down", "not_an_array"])
def test_a_call_it_must_not_take_is_refused_having_done_nothing(job, why):
    express, parts, theirs = job
    teach_sum(express)
    teach_sum(express, "int64", 3)
    x, op = np.ones(4, np.float32), SUM
    if why == "loop_busy":
        parts.runner.handed = 1  # an operation of the group is still on the loop
    elif why == "closed":
        parts.session.closed = True
    elif why == "broken":
        parts.faults.broken[GROUP] = RuntimeError("broken")
    elif why == "early_frames":
        parts.early.frames = 1
    elif why == "lock_taken":
        parts.lock.acquire()
    elif why == "other_op":
        op = ReduceOp.MAX
    elif why == "other_dtype":
        x = np.ones(4, np.int32)
    elif why == "other_size":
        x = np.ones(5, np.float32)
    elif why == "strided":
        x = np.ones(8, np.float32)[::2]
    elif why == "read_only":
        x.flags.writeable = False
    elif why == "subclass":
        x = x.view(np.matrix)
    elif why == "unaligned":
        x = np.frombuffer(memoryview(bytearray(25))[1:], np.int64)  # 3, taught
    elif why == "torn_down":
        express.forget()
    elif why == "not_an_array":
        x = [1.0, 1.0, 1.0, 1.0]
    before = theirs.same(1, FP), parts.runner._seq, counted(parts), parts.step.operation
    assert express.all_reduce(x, op) is False
    assert (theirs.same(1, FP), parts.runner._seq, counted(parts),
            parts.step.operation) == before
    assert parts.runner.handed_over == []
    assert (parts.progress.running, parts.progress.completed) == (None, 0)
    if why == "lock_taken":
        parts.lock.release()
    assert not parts.lock.locked()


def test_the_recorder_opens_a_run_then_samples_it_as_runner_here_does(job):
    _, parts, theirs = job
    recorder = parts.runner.recorder = Recorder()
    express = make(parts)  # reads the runner's recorder as it is made
    express.arm(parts.mine, parts.step, 50)
    teach_sum(express)
    before = time.time_ns()
    for operation in (1, 2, 3, 4, 5, 6):  # seq 11 to 16: a sample every 4
        their_part(theirs, operation, np.ones(4, np.float32))
        assert express.all_reduce(np.ones(4, np.float32), SUM) is True
    # The first call was not of the recorder's run: it opened one, as Runner.here does;
    # the rest are of it, and every 4th is sampled into the ring, numbered by its count.
    assert recorder.runs == [(GROUP, 11, "all_reduce", FP, "arena", 30.0)]
    ring = recorder.sample_ring[0]
    assert [sample[:3] if sample else None for sample in ring] == [
        (0, GROUP, 12), (1, GROUP, 16), None]
    assert all(before <= sample[3] <= time.time_ns() for sample in ring[:2])


def test_frames_kept_early_during_a_call_are_scanned_on_the_loop_after_it(job):
    _, parts, theirs = job

    class Arriving(Recorder):
        def open_run(self, *args):
            super().open_run(*args)
            parts.early.frames = 1  # as if the loop kept a frame while the call ran

    parts.runner.recorder = Arriving()
    express = make(parts)
    express.arm(parts.mine, parts.step, 50)
    teach_sum(express)
    their_part(theirs, 1, np.ones(4, np.float32))
    assert express.all_reduce(np.ones(4, np.float32), SUM) is True
    assert parts.scans == [GROUP]
    # With frames kept, the next call goes the Python way, which scans them first.
    assert express.all_reduce(np.ones(4, np.float32), SUM) is False


def test_the_path_lock_behaves_as_threading_lock():
    lock = _native.arena.PathLock()
    assert not lock.locked() and lock.acquire() and lock.locked()
    assert lock.acquire(False) is False and lock.acquire(blocking=False) is False
    began = time.monotonic()
    assert lock.acquire(timeout=0.05) is False
    assert time.monotonic() - began >= 0.04
    threading.Timer(0.05, lock.release).start()
    assert lock.acquire(True, 5) is True  # given back by another thread
    lock.release()
    with pytest.raises(RuntimeError, match="unlocked"):
        lock.release()
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(False, 1)
    with pytest.raises(ValueError, match="non-negative"):
        lock.acquire(timeout=-2)
    with pytest.raises(TypeError, match="keyword"):
        lock.acquire(wait=True)
    with lock:
        assert lock.locked()
    assert not lock.locked()


def test_teaching_checks_what_it_is_taught_and_stops_at_its_room(job):
    express, _, _ = job
    kind = _native.kind(np.dtype("float32"), SUM)
    with pytest.raises(ValueError, match="kind"):
        express.learn(ALL_REDUCE, "all_reduce", FP, resume, np.dtype("float32"), 16, SUM, 999)
    with pytest.raises(ValueError, match="6 bytes"):
        express.learn(ALL_REDUCE, "all_reduce", FP, resume, np.dtype("float32"), 6, SUM, kind)
    with pytest.raises(ValueError, match="collective 5"):
        express.learn(5, "x", FP, resume, None, 0, None, -1)
    with pytest.raises(TypeError):
        express.learn(ALL_REDUCE, "all_reduce", FP, "not callable", np.dtype("float32"), 16,
                      SUM, kind)
    with pytest.raises(TypeError):
        express.arm("not a core", None, 0)
    taken = [express.learn(ALL_REDUCE, "all_reduce", FP, resume, np.dtype("float32"),
                           4 * (n + 1), SUM, kind) for n in range(40)]
    assert taken == [True] * 32 + [False] * 8 and express.count == 32
    express.forget()
    assert express.count == 0


def test_an_unarmed_entry_takes_nothing_and_cycles_through_it_are_collected():
    parts = SimpleNamespace(
        runner=Runner(), session=SimpleNamespace(closed=False), counter=counter(0),
        faults=SimpleNamespace(broken={}), progress=Progress(), early=EarlyCount(),
        lock=_native.arena.PathLock(), scans=[])
    express = make(parts)
    teach_sum(express)
    assert express.all_reduce(np.ones(4, np.float32), SUM) is False
    assert express.barrier() is False
    parts.runner.express = express  # a cycle: runner -> express -> runner
    del express, parts
    assert gc.collect() > 0


def recording_function(calls: list[tuple[Any, ...]]):
    def all_reduce(tensor, op=SUM, group=None, async_op=False):
        """The Python function a Front stands for."""
        calls.append((tensor, op, group, async_op))
        return "from the function"
    return all_reduce


def test_a_front_takes_the_simple_calls_to_the_world_entry_and_passes_on_the_rest(job):
    express, parts, theirs = job
    teach_sum(express)
    calls: list[tuple[Any, ...]] = []
    function = recording_function(calls)
    world = SimpleNamespace(current=SimpleNamespace(express=express))
    front = _native.arena.Front(function, 0, world, SUM)
    for operation, call in enumerate([lambda x: front(x), lambda x: front(x, SUM)], 1):
        their_part(theirs, operation, np.full(4, 2.0, np.float32))
        x = np.ones(4, np.float32)
        assert call(x) is None and (x == 3).all()
    assert calls == [] and parts.runner._seq == 12
    x = np.ones(4, np.float32)
    # Keywords, another op, an array the entry was not taught: the function's.
    assert front(x, op=SUM) == "from the function"
    assert front(x, ReduceOp.MAX) == "from the function"
    assert front(np.ones(5, np.float32)) == "from the function"
    assert front(x, SUM, None, True) == "from the function"
    assert [call[1:] for call in calls] == [(SUM, None, False), (ReduceOp.MAX, None, False),
                                            (SUM, None, False), (SUM, None, True)]
    # No world, or something other than an Express in its place: the function's.
    for current in (None, SimpleNamespace(express=None), SimpleNamespace(express="spy")):
        world.current = current
        assert front(x) == "from the function"
    del world.current
    assert front(x) == "from the function"
    assert parts.runner._seq == 12


def test_a_call_the_entry_declined_goes_to_the_declined_twin_having_asked_it_once(job):
    express, parts, theirs = job
    teach_sum(express)
    calls: list[tuple[Any, ...]] = []
    declined: list[tuple[Any, ...]] = []

    def all_reduce_declined(tensor, op=SUM):
        declined.append((tensor.size, op))
        return "from the twin"

    world = SimpleNamespace(current=SimpleNamespace(express=express))
    front = _native.arena.Front(recording_function(calls), 0, world, SUM, all_reduce_declined)
    asked = express.asked
    five = np.ones(5, np.float32)  # a size the entry was not taught
    assert front(five) == "from the twin" and front(five, ReduceOp.MAX) == "from the twin"
    assert declined == [(5, SUM), (5, ReduceOp.MAX)] and calls == []
    assert express.asked == asked + 2
    # A call the front does not take to the entry: the function's, the entry not asked.
    assert front(five, op=SUM) == "from the function" and express.asked == asked + 2
    # A stand-in in the entry's place: the function asks it itself.
    world.current = SimpleNamespace(express="spy")
    assert front(five) == "from the function" and len(calls) == 2
    world.current = SimpleNamespace(express=express)
    their_part(theirs, 1, np.full(4, 2.0, np.float32))
    x = np.ones(4, np.float32)
    assert front(x) is None and (x == 3).all() and express.asked == asked + 3
    assert len(declined) == 2 and len(calls) == 2
    with pytest.raises(ValueError, match="declined twin"):
        _native.arena.Front(recording_function(calls), 0, world, SUM, "not callable")


def test_a_barrier_the_entry_declined_goes_to_the_declined_twin(job):
    express, parts, _ = job
    declined: list[str] = []
    front = _native.arena.Front(lambda *args: "from the function", 1, SimpleNamespace(
        current=SimpleNamespace(express=express)), None, lambda: declined.append("twin"))
    asked = express.asked
    assert front() is None and declined == ["twin"] and express.asked == asked + 1
    assert front(None, True) == "from the function" and express.asked == asked + 1


def test_a_front_is_its_function_to_every_reader_and_raises_what_the_entry_raises(job):
    import inspect

    express, parts, theirs = job
    teach_sum(express)
    function = recording_function([])
    front = _native.arena.Front(function, 0, SimpleNamespace(
        current=SimpleNamespace(express=express)), SUM)
    assert front.__wrapped__ is function and front.__name__ == "all_reduce"
    assert front.__doc__ == function.__doc__ and front.__module__ == function.__module__
    assert inspect.signature(front) == inspect.signature(function)
    assert "compiled front" in repr(front)
    parts.step.operation = "not a number"  # what the entry reads is broken: it raises
    with pytest.raises(TypeError):
        front(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="barrier"):
        _native.arena.Front(function, 7, None, None)


def test_a_front_of_barrier_meets_the_others_through_the_entry(job):
    express, parts, theirs = job
    assert express.learn(BARRIER, "barrier", BARRIER_FP, resume, None, 0, None, -1)
    calls: list[tuple[Any, ...]] = []

    def barrier(group=None, async_op=False, device_ids=None):
        calls.append((group, async_op, device_ids))

    front = _native.arena.Front(barrier, 1, SimpleNamespace(
        current=SimpleNamespace(express=express)), None)
    theirs.publish(1, BARRIER_FP)
    assert front() is None and parts.step.operation == 1 and calls == []
    assert front(None, True) is None and calls == [(None, True, None)]


def test_the_package_offers_the_fronts_where_the_extension_is_built():
    import asyncoll
    from asyncoll._api import blocking

    assert asyncoll.all_reduce.__wrapped__ is blocking.all_reduce
    assert asyncoll.barrier.__wrapped__ is blocking.barrier


def test_a_front_keeps_the_entry_while_the_world_ends_during_its_call(job):
    _, parts, theirs = job
    world = SimpleNamespace()

    class Ending(Runner):
        def here(self, *args):
            del world.current  # the world ends (another thread) while the call waits
            gc.collect()
            return super().here(*args)

    parts.runner = Ending()
    parts.runner.lock = parts.lock
    express = make(parts)
    express.arm(parts.mine, parts.step, 50)
    teach_sum(express)
    world.current = SimpleNamespace(express=express)
    del express  # the world holds the only reference
    front = _native.arena.Front(recording_function([]), 0, world, SUM)
    assert front(np.ones(4, np.float32)) is None  # a late member: handed to here
    assert len(parts.runner.handed_over) == 1 and not parts.lock.locked()
