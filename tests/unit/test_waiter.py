"""The arena Waiter's yields: a yield that hands the processor to a stranger ends them.

A yield that comes back after a scheduler's time slice (longer than
STRANGER_NS) went to a task that is no member: the Waiter stops yielding,
sleeps instead (its rest, which the member waited for wakes), and skips its
yields in every wait for a while: QUIET_FIRST_NS, doubled up to
QUIET_LONGEST_NS while strangers come back. The yields are faked: a slow one
sleeps past STRANGER_NS, a lower bound that a loaded machine only lengthens.
"""

from __future__ import annotations

import time

import pytest

from asyncoll._native.contract import QUIET_FIRST_NS, QUIET_LONGEST_NS, STRANGER_NS
from asyncoll._transport.shm import arena
from asyncoll._transport.shm.arena import Waiter

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


def test_a_yield_that_went_to_a_stranger_ends_the_yields_and_the_wait_sleeps(slow):
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100)

    waiter.until(ReadyAfter(10))

    assert slow.yields == 1, "it went on yielding after a yield lost a time slice"
    assert len(slow.rests) >= 1
    assert waiter.quiet_until > time.monotonic()


def test_after_one_the_next_waits_sleep_without_yielding(slow):
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100)
    waiter.until(ReadyAfter(10))
    slow.yields, slow.rests = 0, []

    waiter.until(ReadyAfter(5))

    assert slow.yields == 0 and len(slow.rests) >= 1
    assert waiter.quiet_until <= time.monotonic() + QUIET_FIRST_NS / 1e9


def test_once_the_quiet_time_is_over_the_waits_yield_again(slow):
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100)
    waiter.quiet_until = time.monotonic() - 1.0  # a stranger seen long ago
    slow.slow = False

    waiter.until(ReadyAfter(10))

    assert slow.yields > 0


FIRST, LONGEST = QUIET_FIRST_NS / 1e9, QUIET_LONGEST_NS / 1e9


def test_a_stranger_met_again_soon_after_a_quiet_time_doubles_it_up_to_the_longest():
    waiter = Waiter(0.0, lambda poll: None)
    now = 1000.0
    waiter._met_stranger(now)
    lengths = [waiter.quiet_s]
    for _ in range(12):
        now = waiter.quiet_until + waiter.quiet_s / 2  # within its length of its end
        waiter._met_stranger(now)
        lengths.append(waiter.quiet_s)

    assert lengths[:3] == [FIRST, 2 * FIRST, 4 * FIRST]
    assert max(lengths) == lengths[-1] == LONGEST
    assert waiter.quiet_until == now + LONGEST


def test_a_stranger_met_long_after_the_last_quiet_time_starts_a_short_one_again():
    waiter = Waiter(0.0, lambda poll: None)
    waiter._met_stranger(1000.0)
    waiter._met_stranger(waiter.quiet_until + FIRST / 2)
    assert waiter.quiet_s == 2 * FIRST

    later = waiter.quiet_until + 2 * FIRST + 1.0  # a rare stranger: an idle machine's daemon
    waiter._met_stranger(later)

    assert (waiter.quiet_s, waiter.quiet_until) == (FIRST, later + FIRST)
