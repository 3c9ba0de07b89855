"""Closing a fast path under its lock: at once when free, after the running operation."""

from __future__ import annotations

import logging
import threading

import pytest

from asyncoll._group.closing import close_under, destroyed
from asyncoll.errors import ClosedError

pytestmark = pytest.mark.timeout(30)


def test_a_free_path_is_closed_at_once_holding_its_lock():
    lock = threading.Lock()
    held_while_closing = []

    assert close_under(lock, lambda: held_while_closing.append(lock.locked()), "path")

    assert held_while_closing == [True]
    assert not lock.locked()


def test_the_close_waits_for_the_operation_holding_the_lock_to_end():
    lock = threading.Lock()
    lock.acquire()
    closed = []
    threading.Timer(0.2, lock.release).start()  # the operation ends

    assert close_under(lock, lambda: closed.append(True), "path", wait_s=10)

    assert closed == [True]


def test_an_operation_that_outlasts_the_wait_is_left_to_close_and_a_warning_says_so(caplog):
    lock = threading.Lock()
    lock.acquire()
    closed = []

    with caplog.at_level(logging.WARNING, logger="asyncoll"):
        assert not close_under(lock, lambda: closed.append(True), "group 7's arena",
                               wait_s=0.05)

    assert closed == []
    assert "group 7's arena stays open until the operation" in caplog.text
    lock.release()


def test_an_operation_stopped_by_the_close_raises_closed_naming_group_and_operation():
    error = destroyed(7, 12)

    assert isinstance(error, ClosedError)
    assert "group 7 was destroyed on this rank while its operation #12 ran" in str(error)
