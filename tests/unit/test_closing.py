"""Closing a fast path under its lock: at once when free, after the running operation."""

from __future__ import annotations

import logging
import mmap
import threading
import traceback

import pytest

from asyncoll._group.closing import close_under, destroyed, drop_frames
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


def _kernel_failing_while_it_holds_a_view(memory: mmap.mmap) -> None:
    view = memoryview(memory)[:8]  # as the pure-Python arena's slots are held
    raise ClosedError(f"closed while a view of {len(view)} bytes was held")


def test_dropping_a_failed_kernels_frames_lets_its_memory_be_unmapped():
    memory = mmap.mmap(-1, 4096)
    with pytest.raises(ClosedError) as caught:
        _kernel_failing_while_it_holds_a_view(memory)
    with pytest.raises(BufferError):
        memory.close()  # the error's traceback keeps the kernel's view alive

    drop_frames(caught.value)

    memory.close()
    assert memory.closed
    # The lines stay for whoever reads the error.
    assert "_kernel_failing_while_it_holds_a_view" in "".join(
        traceback.format_exception(caught.value))
