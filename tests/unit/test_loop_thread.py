"""The background loop thread behind the blocking API."""

from __future__ import annotations

import asyncio

import pytest

from asyncoll._runtime.loop import LoopThread

pytestmark = pytest.mark.timeout(30)


def test_blocking_call_from_the_loop_thread_raises_instead_of_deadlocking():
    thread = LoopThread()
    try:
        async def nested() -> None:
            thread.run(asyncio.sleep(0))

        with pytest.raises(RuntimeError, match="would deadlock"):
            thread.run(nested())
    finally:
        thread.stop()


def test_run_returns_the_coroutine_result_and_stop_joins_the_thread():
    thread = LoopThread()
    assert thread.run(asyncio.sleep(0, result=42)) == 42
    thread.stop()
    assert thread.loop.is_closed()
