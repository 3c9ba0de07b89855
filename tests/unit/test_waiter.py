"""The arena Waiter's yields: a yield that hands the processor to a stranger ends them.

A yield that comes back after a scheduler's time slice (longer than
STRANGER_NS) while the machine runs a task that is no member (more tasks
run than the arena has members awake) went to that task: the Waiter stops yielding,
sleeps instead (its rest, which the member waited for wakes), and skips its
yields in every wait for QUIET_NS. The yields are faked: a slow one sleeps
past STRANGER_NS, a lower bound that a loaded machine only lengthens.
"""

from __future__ import annotations

import mmap
import os
import time

import numpy as np
import pytest

from asyncoll import _native
from asyncoll._native import arena as native
from asyncoll._native.contract import (PROCESSOR, PUBLISHED, QUIET_NS, SLEEPING, STRANGER_NS,
                                       WAITING)
from asyncoll._transport.shm import arena
from asyncoll._transport.shm.arena import Arena, Waiter, arena_bytes
from asyncoll._transport.shm.tasks import running_tasks
from asyncoll.types import ReduceOp

pytestmark = pytest.mark.timeout(60)


class ReadyAfter:
    """A poll that is ready on its ``polls``-th look."""

    published = False
    phase = 1

    def __init__(self, polls: int) -> None:
        self.left = polls

    def __call__(self) -> bool:
        self.left -= 1
        return self.left < 0

    def behind(self) -> list[int]:
        return [1]


class Scheduler:
    """Fake yields, each slow (past STRANGER_NS) or not, and the rests taken."""

    def __init__(self, slow: bool) -> None:
        self.slow = slow
        self.yields = 0
        self.rests: list[float] = []

    def sched_yield(self) -> None:
        self.yields += 1
        if self.slow:
            time.sleep(2 * STRANGER_NS / 1e9)

    def rest(self, poll: object, seconds: float) -> None:
        self.rests.append(seconds)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> Scheduler:
    scheduler = Scheduler(slow=True)
    monkeypatch.setattr(arena.os, "sched_yield", scheduler.sched_yield)
    return scheduler


def test_a_second_yield_that_went_to_a_stranger_ends_the_yields_and_the_wait_sleeps(slow):
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100)

    waiter.until(ReadyAfter(10))

    assert slow.yields == 2, "it went on yielding after two yields lost a time slice each"
    assert len(slow.rests) >= 1
    assert waiter.quiet_until > time.monotonic()


def test_one_yield_to_a_passing_stranger_leaves_the_yields_on(slow):
    # An idle machine's passing task (a daemon's wake-up) takes one late yield.
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100)

    waiter.until(ReadyAfter(1))
    slow.slow = False
    waiter.until(ReadyAfter(10))

    assert slow.yields == 11 and slow.rests == []
    assert waiter.quiet_until == 0.0 and waiter.suspect_until > time.monotonic()


def test_one_yield_to_a_stranger_soon_after_a_quiet_time_makes_the_waits_quiet_again(slow):
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100)
    quiet_s = QUIET_NS / 1e9
    waiter._met_stranger(100.0)
    waiter._met_stranger(100.1)
    assert waiter.quiet_until == 100.1 + quiet_s

    waiter._met_stranger(waiter.quiet_until + quiet_s / 2)  # the neighbour is still there
    assert waiter.quiet_until == pytest.approx(100.1 + 2.5 * quiet_s)

    # Long after: one is not enough.
    waiter._met_stranger(waiter.quiet_until + (arena.NEIGHBOUR_STAYS + 1) * quiet_s)
    assert waiter.quiet_until == pytest.approx(100.1 + 2.5 * quiet_s)


def test_after_one_the_next_waits_sleep_without_yielding(slow):
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100)
    waiter.until(ReadyAfter(10))
    slow.yields, slow.rests = 0, []

    waiter.until(ReadyAfter(5))

    assert slow.yields == 0 and len(slow.rests) >= 1
    assert waiter.quiet_until <= time.monotonic() + QUIET_NS / 1e9


def test_once_the_quiet_time_is_over_the_waits_yield_again(slow):
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100)
    waiter.quiet_until = time.monotonic() - 1.0  # a stranger seen long ago
    slow.slow = False

    waiter.until(ReadyAfter(10))

    assert slow.yields > 0


def test_a_late_yield_while_no_stranger_runs_leaves_the_yields_on(slow):
    # More members than processors: a member that works for longer than a
    # time slice takes the yield, and yielding to it is still right.
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100,
                    strangers=lambda: False)

    waiter.until(ReadyAfter(10))

    assert slow.yields == 10 and slow.rests == []
    assert waiter.quiet_until == 0.0


@pytest.fixture
def first_of_three() -> Arena:
    """Member 0's view of an arena of three (the others' lines are its words too)."""
    member = Arena(mmap.mmap(-1, arena_bytes(3, 64)), 3, 0, 64)
    yield member
    member.close()


@pytest.mark.parametrize("running, asleep, strangers", [
    (3, [], False), (4, [], True), (2, [], False), (2, [1], False), (3, [1], True),
    (2, [1, 2], True), (None, [], True)])
def test_strangers_run_where_more_tasks_run_than_members_are_awake(
        first_of_three, monkeypatch, running, asleep, strangers):
    monkeypatch.setattr(arena, "running_tasks", lambda: running)
    for member in asleep:
        first_of_three._words[member * arena.LINE_WORDS + SLEEPING] = 1

    assert first_of_three.strangers_running() is strangers


@pytest.mark.skipif(not native, reason="the compiled extension is not built")
@pytest.mark.parametrize("asleep", [0, 256], ids=["all awake", "all asleep"])
def test_the_compiled_rule_gives_the_python_one_s_answer(asleep):
    # 256 members awake outnumber what this machine runs; none awake, they cannot.
    member = Arena(mmap.mmap(-1, arena_bytes(256, 64)), 256, 0, 64)
    try:
        for index in range(asleep):
            member._words[index * arena.LINE_WORDS + SLEEPING] = 1
        assert member.core.strangers_running() is member.strangers_running() is (asleep > 0)
    finally:
        member.close()


def test_the_running_tasks_are_read_from_the_kernel_and_count_this_one():
    running = running_tasks()

    assert running is None or running >= 1
    if open("/proc/loadavg").read():  # Linux: the count is there
        assert running is not None


@pytest.mark.skipif(not native, reason="the compiled extension is not built")
def test_a_compiled_publish_notes_the_processor_it_ran_on():
    # The compiled wait skips its spin for a member on its own processor, which it
    # reads from that member's line: each publish writes it (the processor + 1).
    allowed = os.sched_getaffinity(0)
    member = Arena(mmap.mmap(-1, arena_bytes(2, 64)), 2, 0, 64)
    try:
        for phase, processor in enumerate(sorted(allowed)[:2], start=1):
            os.sched_setaffinity(0, {processor})
            member.publish(phase, (9, 0, 0, 1, -1, 0))
            assert member._words[PROCESSOR] == processor + 1
    finally:
        os.sched_setaffinity(0, allowed)
        member.close()


# -- a member waited for on another processor while a stranger runs ---------------------


@pytest.mark.parametrize("elsewhere, yields", [(True, 0), (False, 10)])
def test_a_wait_whose_member_is_elsewhere_beside_a_stranger_sleeps_without_yielding(
        monkeypatch, elsewhere, yields):
    # As a compiled step hands its wait over: its brief wait (spins and yields) spent.
    scheduler = Scheduler(slow=False)
    monkeypatch.setattr(arena.os, "sched_yield", scheduler.sched_yield)
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 4, scheduler.rest, yields=100,
                    elsewhere=lambda: elsewhere)

    waiter.until(ReadyAfter(10), 4 + 16)

    assert (scheduler.yields, len(scheduler.rests) > 0) == (yields, elsewhere)


def _waits_for_member_1(size: int, asleep: bool, beside: bool) -> bool:
    """Member 0's compiled brief wait for member 1, which never publishes and last
    ran on this processor or another; every member marked asleep (so that this
    thread is a task no member accounts for: a stranger runs) or none. Whether the
    wait found it must not yield."""
    allowed = os.sched_getaffinity(0)
    here = sorted(allowed)[0]
    member = Arena(mmap.mmap(-1, arena_bytes(size, 64)), size, 0, 64)
    try:
        os.sched_setaffinity(0, {here})
        words = member._words
        for index in range(size):
            words[index * arena.LINE_WORDS + SLEEPING] = int(asleep)
        words[PUBLISHED] = 1  # member 0's own part is there
        words[arena.LINE_WORDS + PROCESSOR] = here + 1 if beside else here + 2
        assert member.core.wait(1, 64) is False
        return bool(member.core.yields_to_stranger())
    finally:
        os.sched_setaffinity(0, allowed)
        member.close()


@pytest.mark.skipif(not native, reason="the compiled extension is not built")
def test_the_compiled_wait_says_when_it_waited_elsewhere_beside_a_stranger():
    assert _waits_for_member_1(2, asleep=True, beside=False)
    # No stranger: 256 members awake outnumber what this machine runs.
    assert not _waits_for_member_1(256, asleep=False, beside=False)
    # The member on this processor: the wait hands the processor to it, as before.
    assert not _waits_for_member_1(2, asleep=True, beside=True)


# -- two members on one processor while a stranger runs -----------------------------------


def _processor_after_waits_beside(waits: int, split: bool = False) -> tuple[int, int, set[int]]:
    """Member 0's compiled brief waits for member 1, which never publishes and last
    ran on member 0's processor, while a stranger runs (every member marked asleep);
    member 0 started on the first of two processors it may run on. That processor,
    the one it noted in its line after ``waits`` waits (or ``split`` all_reduce
    steps, each ending in a wait), and its affinity then."""
    allowed = os.sched_getaffinity(0)
    here, other = sorted(allowed)[:2]
    member = Arena(mmap.mmap(-1, arena_bytes(2, 64)), 2, 0, 64)
    try:
        os.sched_setaffinity(0, {here})
        os.sched_setaffinity(0, {here, other})  # still on `here`: no reason to move
        words = member._words
        for index in range(2):
            words[index * arena.LINE_WORDS + SLEEPING] = 1
        words[PUBLISHED] = 1  # member 0's own part is there
        words[arena.LINE_WORDS + PROCESSOR] = here + 1
        data = np.ones(16, dtype=np.float32)
        kind = _native.kind(data.dtype, ReduceOp.SUM)
        for _ in range(waits):
            if split:
                assert member.core.split(data, 1, (9, 0, 0, 1, -1, 0), kind, 64, 0) == WAITING
            else:
                assert member.core.wait(1, 64) is False
        member.core.wait(1, 64)  # notes where it runs now
        return here, words[PROCESSOR] - 1, os.sched_getaffinity(0)
    finally:
        os.sched_setaffinity(0, allowed)
        member.close()


@pytest.mark.skipif(not native, reason="the compiled extension is not built")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one processor: none to move to")
def test_a_member_that_keeps_waiting_beside_its_member_while_a_stranger_runs_moves_off():
    # The 32nd wait in a row moves member 0 off the processor it shares with member 1
    # (SHARED_WAITS_TO_MOVE in core.c); the wait after it notes the new one. Its
    # affinity is given back whole: the move binds nothing.
    here, noted, affinity = _processor_after_waits_beside(32)

    assert noted != here
    assert affinity == set(sorted(os.sched_getaffinity(0))[:2])


@pytest.mark.skipif(not native, reason="the compiled extension is not built")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one processor: none to move to")
@pytest.mark.parametrize("waits, split", [(8, False), (64, True)], ids=["a few", "split"])
def test_a_few_waits_or_the_split_all_reduce_s_leave_a_member_where_it_is(waits, split):
    # The split all_reduce's work between waits outweighs a switch: its waits do not count.
    here, noted, _ = _processor_after_waits_beside(waits, split)

    assert noted == here
