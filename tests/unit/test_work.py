"""Work.wait() tells its own wait's timeout from the operation's."""

from __future__ import annotations

import concurrent.futures

import pytest

from asyncoll._work import Work
from asyncoll.errors import CollectiveTimeoutError


def test_wait_reraises_the_operations_own_timeout_unchanged():
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    error = CollectiveTimeoutError("all_reduce #3 did not complete within 5 s")
    future.set_exception(error)
    with pytest.raises(CollectiveTimeoutError) as raised:
        Work(future, "all_reduce").wait()
    assert raised.value is error


def test_wait_with_a_timeout_on_a_running_operation_says_it_is_still_running():
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    with pytest.raises(CollectiveTimeoutError, match="did not complete within 0.01 s of wait"):
        Work(future, "all_reduce").wait(0.01)
