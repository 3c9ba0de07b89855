"""Work.wait() tells its own wait's timeout from the operation's."""

from __future__ import annotations

import concurrent.futures
from datetime import timedelta

import pytest

from asyncoll._api.work import Work
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
    with pytest.raises(CollectiveTimeoutError,
                       match="did not complete within 0.01 s of wait.*Timed out waiting 10ms"):
        Work(future, "all_reduce").wait(0.01)


def _torch_work(future: concurrent.futures.Future[None]):
    pytest.importorskip("torch")
    from asyncoll._torch_backend.work import AsyncollWork
    return AsyncollWork(future, [], "all_reduce", world=None)


def test_the_torch_backends_work_waits_through_asyncolls_work(monkeypatch):
    # One wait(): the torch face converts torch's timeout and delegates.
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    work = _torch_work(future)
    waited = []
    monkeypatch.setattr(Work, "wait", lambda self, timeout=None: waited.append(timeout) or True)

    assert work.wait(timedelta(seconds=2)) is True
    assert work.wait(0) is True
    assert work.wait() is True
    assert waited == [2.0, None, None]


def test_the_torch_backends_work_raises_the_operations_error_and_its_own_timeout_as_torchs():
    dist = pytest.importorskip("torch.distributed")
    failed: concurrent.futures.Future[None] = concurrent.futures.Future()
    error = CollectiveTimeoutError("all_reduce #3 did not complete within 5 s")
    failed.set_exception(error)
    with pytest.raises(CollectiveTimeoutError) as raised:
        _torch_work(failed).wait()
    # torch's error and asyncoll's class at once, caused by the operation's own.
    assert isinstance(raised.value, dist.DistBackendError) and raised.value.__cause__ is error
    assert str(raised.value) == str(error)
    assert _torch_work(failed).exception().__cause__ is error
    assert not _torch_work(failed).is_success()
    with pytest.raises(dist.DistBackendError,
                       match="did not complete within 0.01 s of wait.*Timed out waiting 10ms"):
        _torch_work(concurrent.futures.Future()).wait(timedelta(milliseconds=10))
