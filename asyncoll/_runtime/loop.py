"""The runtime's threads: the event loop thread, and threads that run callbacks off it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from asyncoll._compat import loop_factory

log = logging.getLogger("asyncoll")

T = TypeVar("T")


class LoopThread:
    """An event loop (uvloop where installed) running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = loop_factory()()
        self._thread = threading.Thread(target=self._run, name="asyncoll-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; return a future of its result.

        Raises:
            RuntimeError: called from the loop's own thread, where waiting on the
                result would deadlock.
        """
        self._refuse_own_thread(coro)
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and block until it finishes; its deadline is its own.

        This is every blocking call's hop, so it is kept to one wake-up each
        way: a plain callback starts the task, and a lock released by the
        task's done callback wakes this thread. (run_coroutine_threadsafe
        chains two futures and cost about twice as much per call here.)
        A KeyboardInterrupt while waiting cancels the task.
        """
        self._refuse_own_thread(coro)
        finished = threading.Lock()
        finished.acquire()
        task: list[asyncio.Task[T]] = []

        def start() -> None:
            task.append(self.loop.create_task(coro))
            task[0].add_done_callback(lambda _: finished.release())

        self.loop.call_soon_threadsafe(start)
        try:
            finished.acquire()
        except BaseException:
            self.loop.call_soon_threadsafe(lambda: task[0].cancel() if task else None)
            raise
        return task[0].result()

    def _refuse_own_thread(self, coro: Coroutine[Any, Any, Any]) -> None:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("the blocking asyncoll API was called from asyncoll's own "
                               "event loop thread, where it would deadlock; use asyncoll.aio "
                               "from async code")

    def stop(self) -> None:
        """Stop the loop and join its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()


class CallbackThread:
    """Runs callables one at a time, in order, on a daemon thread of its own.

    For callbacks that must not run on the event loop thread (a torch
    future's callback may start a collective, which waits for that loop).
    """

    def __init__(self, name: str) -> None:
        self._actions: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def put(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the thread; once the thread is stopped and gone, here."""
        if self._stopped and not self._thread.is_alive():
            action()
        else:
            self._actions.put(action)

    def stop(self) -> None:
        """Run what is queued, then end and join the thread (not from the thread itself)."""
        self._stopped = True
        self._actions.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()
        # Anything queued after the thread's last look runs here.
        while not self._actions.empty():
            action = self._actions.get()
            if action is not None:
                _call(action)

    def _run(self) -> None:
        while True:
            action = self._actions.get()
            if action is None:
                return
            _call(action)


def _call(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:  # noqa: BLE001 - a callback's error must not stop the thread
        log.exception("asyncoll: a callback raised")
