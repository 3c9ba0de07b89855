"""The front doors' one repeat check (asyncoll._group.repeats.ran_again), on a stand-in group.

Who is asked, in what order, and who is not: the group's compiled entry
first for an all_reduce or a barrier within the group's timeout, unless the
caller's compiled front asked it already; then the remembered calls. The
same check in real jobs: tests/integration/test_arena_path.py (the blocking
API) and tests/torch_backend/test_behaviour.py (the torch backend).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncoll._group.repeats import Repeats, ran_again
from asyncoll._wire.frames import Fingerprint
from asyncoll.types import ReduceOp

pytestmark = pytest.mark.timeout(30)

SUM = ReduceOp.SUM


class Entry:
    """A compiled entry that answers ``takes`` and records each ask."""

    def __init__(self, takes: bool) -> None:
        self.takes = takes
        self.asks: list[tuple[Any, ...]] = []

    def all_reduce(self, array: Any, op: Any) -> bool:
        self.asks.append(("all_reduce", array, op))
        return self.takes

    def barrier(self) -> bool:
        self.asks.append(("barrier",))
        return self.takes


class Group:
    """What ran_again reads of a group: its entry, and an again that records each call."""

    def __init__(self, express: Entry | None, again: bool = False) -> None:
        self.express = express
        self.answer = again
        self.agains: list[tuple[Any, ...]] = []

    def again(self, what: str, arrays: Any, op: Any = None, root: int = -1,
              limit: float | None = None) -> bool:
        self.agains.append((what, op, root, limit))
        return self.answer


def test_an_all_reduce_the_entry_takes_asks_nothing_more():
    group, x = Group(Entry(takes=True)), np.ones(4)
    assert ran_again(group, "all_reduce", x, SUM) is True
    assert group.express.asks == [("all_reduce", x, SUM)] and group.agains == []


def test_a_call_the_entry_declines_goes_to_the_remembered_calls_after_one_ask():
    group = Group(Entry(takes=False), again=True)
    assert ran_again(group, "barrier", None) is True
    assert group.express.asks == [("barrier",)] and group.agains == [("barrier", None, -1, None)]


@pytest.mark.parametrize("why, what, limit, asked", [
    ("the caller's front asked it already", "all_reduce", None, True),
    ("a deadline of the call's own", "all_reduce", 5.0, False),
    ("a collective the entry never takes", "broadcast", None, False),
])
def test_the_entry_is_not_asked_for(why, what, limit, asked):
    group = Group(Entry(takes=True))
    assert ran_again(group, what, np.ones(4), SUM, 1, limit, asked) is False, why
    assert group.express.asks == [] and group.agains == [(what, SUM, 1, limit)], why


def test_without_a_compiled_entry_only_the_remembered_calls_are_asked():
    group = Group(None, again=True)
    assert ran_again(group, "all_reduce", np.ones(4), SUM) is True
    assert group.agains == [("all_reduce", SUM, -1, None)]


def test_repeats_run_a_remembered_call_here_and_teach_nothing_without_an_entry():
    here: list[tuple[Any, ...]] = []

    def run_here(what, fingerprint, limit, kernel, arrays):
        here.append((what, limit, kernel, arrays.size))
        return True

    repeats = Repeats(run_here, None, None, 30.0)
    x = np.ones(4, np.float32)
    assert repeats.again("all_reduce", x, SUM) is False  # nothing remembered yet
    kernel = object()
    repeats.remember(("all_reduce", x.dtype, 4, SUM, -1), "all_reduce",
                     Fingerprint(1, 2, 1, 1, -1, 4), kernel, None)
    assert repeats.again("all_reduce", x, SUM) is True
    assert repeats.again("all_reduce", x, SUM, limit=2.0) is True
    assert here == [("all_reduce", 30.0, kernel, 4), ("all_reduce", 2.0, kernel, 4)]
    repeats.forget()
    assert repeats.again("all_reduce", x, SUM) is False and len(here) == 2
