"""The process's one runtime: its event loop thread, its exit hook, joining a job.

Every front door goes through it: the blocking API and the torch backend run
their coroutines on its loop thread and register their cleanup with
:meth:`Runtime.at_exit`; ``aio`` and ``testing.run_ranks`` join through
:meth:`Runtime.join` on their own loop. It is made on first use; its thread
starts on the first blocking call.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from asyncoll._runtime import ending, hosting, torchrun, tracing
from asyncoll._runtime.loop import LoopThread
from asyncoll._runtime.settings import Settings
from asyncoll._runtime.session import Rendezvous, Session
from asyncoll.coordinator.server import Coordinator

log = logging.getLogger("asyncoll")

T = TypeVar("T")


class Runtime:
    """Owns the event loop thread of the blocking faces and what runs at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: LoopThread | None = None
        self._exit_hooks: list[Callable[[], None]] = []

    @property
    def loop(self) -> LoopThread:
        """The loop thread, started on first use."""
        loop = self._loop
        if loop is None:
            with self._lock:
                if self._loop is None:
                    self._loop = LoopThread()
                loop = self._loop
        return loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop thread and wait for its result (see LoopThread.run)."""
        return self.loop.run(coro)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop thread; return a future of its result."""
        return self.loop.submit(coro)

    def at_exit(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` at interpreter exit (once, however often registered), last first.

        Hooks run before the loop thread stops, so they may still use it; a
        program that never cleans up still leaves its jobs, and its peers and
        an embedded coordinator are not left waiting.
        """
        with self._lock:
            if hook not in self._exit_hooks:
                self._exit_hooks.append(hook)

    def forget_at_exit(self, hook: Callable[[], None]) -> None:
        """Undo :meth:`at_exit` (the hook has run already)."""
        with self._lock:
            if hook in self._exit_hooks:
                self._exit_hooks.remove(hook)

    async def join(self, where: Rendezvous, settings: Settings,
                   embedded: Coordinator | None = None) -> Session:
        """Join the job at ``where``, hosting its coordinator when ``where`` says so.

        Runs on the caller's loop. ``embedded`` is a coordinator already hosted
        for this job; the session stops it (or the one hosted here) when it closes.

        Raises:
            RendezvousError: refused, unreachable, timed out, or cannot host.
            ConfigurationError: the coordinator refused this peer's arguments.
        """
        if embedded is None and where.torch_store:
            where, embedded = await torchrun.meet(where, settings)
        if embedded is None and where.may_host:
            embedded = await hosting.host_unless_listening(where.host, where.port,
                                                           settings.token, settings.tls)
            if embedded is not None and where.elastic:
                log.warning("job %r is elastic but its coordinator runs in this process "
                            "(rank 0): if it dies, the others cannot go on. Run the job "
                            "under asyncoll-run or with an asyncoll-coordinator daemon",
                            where.job)
        return await Session.join(where, settings, embedded)

    def exit(self) -> None:
        """The interpreter is exiting: note how (an uncaught exception makes this process's
        leaves say so, see :mod:`asyncoll._runtime.ending`), then :meth:`shutdown`."""
        ending.note_exit()
        self.shutdown()

    def shutdown(self) -> None:
        """Run the exit hooks, last registered first, then stop the loop thread."""
        while True:
            with self._lock:
                if not self._exit_hooks:
                    break
                hook = self._exit_hooks.pop()
            try:
                hook()
            except Exception:  # noqa: BLE001 - every hook must run, and exit must finish
                log.exception("asyncoll: error while cleaning up at exit")
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.stop()


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime, made (and its exit hook registered) on first use."""
    global _runtime
    current = _runtime
    if current is None:
        with _runtime_lock:
            if _runtime is None:
                _runtime = Runtime()
                atexit.register(_runtime.exit)
                # Only the main thread may install it; the first use usually comes from there.
                tracing.install_signal_handler()
            current = _runtime
    return current
