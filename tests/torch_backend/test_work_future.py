"""AsyncollWork's torch future: done when wait() returns, completed once, never on the loop."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from asyncoll._runtime.loop import CallbackThread  # noqa: E402 - after the skip
from asyncoll._torch_backend.work import AsyncollWork  # noqa: E402
from asyncoll.errors import CollectiveTimeoutError  # noqa: E402

pytestmark = pytest.mark.timeout(60)
ROUNDS = 300


class CompletionThread:
    """What AsyncollWork needs of a TorchWorld: a thread completing torch futures."""

    def __init__(self) -> None:
        self._thread = CallbackThread("test-torch-futures")

    def complete_later(self, action: Callable[[], None]) -> None:
        self._thread.put(action)

    def stop(self) -> None:
        self._thread.stop()


@pytest.fixture
def world() -> Any:
    completions = CompletionThread()
    yield completions
    completions.stop()


def _finish_on_a_loop_thread(future: concurrent.futures.Future[Any],
                             error: BaseException | None = None) -> threading.Thread:
    def finish() -> None:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    loop = threading.Thread(target=finish, name="loop")
    loop.start()
    return loop


def test_future_is_done_when_wait_returns_completed_once_and_never_on_the_loop(world):
    calls: list[tuple[int, int]] = []
    loops = []
    for k in range(ROUNDS):
        running: concurrent.futures.Future[Any] = concurrent.futures.Future()
        tensor = torch.full((2,), float(k))
        work = AsyncollWork(running, [tensor], "all_reduce", world)
        future = work.get_future()
        future.then(lambda f, k=k: calls.append((k, threading.get_ident())))
        loops.append(_finish_on_a_loop_thread(running))
        assert work.wait() is True
        assert future.done(), k  # raced against the completion thread: done either way
        assert future.value()[0].tolist() == [float(k)] * 2
    world.stop()  # runs whatever the completion thread still holds
    for loop in loops:
        loop.join(10)
    assert sorted(k for k, _ in calls) == list(range(ROUNDS))  # each callback once
    assert not {ident for _, ident in calls} & {loop.ident for loop in loops}


def test_a_failed_operations_future_is_failed_when_wait_raises(world):
    running: concurrent.futures.Future[Any] = concurrent.futures.Future()
    work = AsyncollWork(running, [torch.zeros(1)], "all_reduce", world)
    future = work.get_future()
    _finish_on_a_loop_thread(running, CollectiveTimeoutError(
        "all_reduce did not complete within 0.05 s. Timed out waiting 50ms")).join(10)
    with pytest.raises(dist.DistBackendError, match="Timed out waiting 50ms") as caught:
        work.wait()
    assert isinstance(caught.value, CollectiveTimeoutError)
    assert future.done()
    with pytest.raises(RuntimeError, match="Timed out waiting 50ms"):
        future.wait()
    assert isinstance(work.exception(), dist.DistBackendError)
    assert work.is_completed() and not work.is_success()


def test_a_future_asked_for_after_completion_is_done_when_given(world):
    running: concurrent.futures.Future[Any] = concurrent.futures.Future()
    running.set_result(None)
    work = AsyncollWork(running, [torch.ones(3)], "broadcast", world)
    future = work.get_future()
    assert future.done() and future.value()[0].tolist() == [1.0] * 3
    assert work.get_future() is future


def test_is_completed_says_true_only_once_the_future_is_done(world):
    for _ in range(ROUNDS // 3):
        running: concurrent.futures.Future[Any] = concurrent.futures.Future()
        work = AsyncollWork(running, [torch.ones(1)], "all_reduce", world)
        future = work.get_future()
        loop = _finish_on_a_loop_thread(running)
        while not work.is_completed():
            pass
        assert future.done()
        loop.join(10)


def test_wait_with_a_timeout_that_expires_leaves_the_future_running(world):
    running: concurrent.futures.Future[Any] = concurrent.futures.Future()
    work = AsyncollWork(running, [torch.ones(1)], "all_reduce", world)
    future = work.get_future()
    with pytest.raises(dist.DistBackendError, match="Timed out waiting 10ms") as caught:
        work.wait(0.01)
    assert isinstance(caught.value, CollectiveTimeoutError)
    assert not future.done()
    running.set_result(None)
    assert work.wait() and future.done()
