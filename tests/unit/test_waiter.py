"""The arena Waiter's yields: a yield that hands the processor to a stranger ends them.

A yield that comes back after a scheduler's time slice (longer than
STRANGER_NS) went to a task that is no member: the Waiter stops yielding,
sleeps instead (its rest, which the member waited for wakes), and skips its
yields in every wait for QUIET_NS. The yields are faked: a slow one sleeps
past STRANGER_NS, a lower bound that a loaded machine only lengthens.
"""

from __future__ import annotations

import time

import pytest

from asyncoll._native.contract import QUIET_NS, STRANGER_NS
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
    assert waiter.quiet_until <= time.monotonic() + QUIET_NS / 1e9


def test_once_the_quiet_time_is_over_the_waits_yield_again(slow):
    waiter = Waiter(time.monotonic() + 60, lambda poll: None, 0, slow.rest, yields=100)
    waiter.quiet_until = time.monotonic() - 1.0  # a stranger seen long ago
    slow.slow = False

    waiter.until(ReadyAfter(10))

    assert slow.yields > 0
