"""AsyncollWork: what the torch backend's collectives return, as torch's Work.

It wraps asyncoll's own Work (asyncoll._api.work), which waits and reports errors:
``wait()`` blocks and raises the operation's error in torch's terms
(asyncoll._torch_backend.errors); ``get_future()`` gives a torch Future that
completes with the output tensors (DDP's reducer chains its gradient
averaging onto it), or with the error.

As gloo's, the torch future is done by the time ``wait()`` returns or raises,
and whenever ``is_completed()`` has said True: the first of those calls to
see the operation finished completes it, in its own thread, unless the
world's completion thread (which completes it for a program that only waits
on the future) got there first, which the call then waits for. A future
asked for after the operation finished is done when it is given. Its
callbacks therefore run in one of those threads, never on the event loop's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from asyncoll._api.work import Work
from asyncoll._group.core import DONE
from asyncoll._torch_backend.errors import torch_error
from asyncoll._torch_backend.world import TorchWorld
from asyncoll.errors import AsyncollError

_WorkBase: Any = dist.distributed_c10d.Work
#: Taken to make a Work's torch future and to claim completing it: briefly, and
#: rarely (once per future), so all Works share it.
_SETTLING = threading.Lock()


class AsyncollWork(_WorkBase):  # type: ignore[misc]
    """An asyncoll operation running on the loop thread, seen through torch's Work."""

    def __init__(self, future: concurrent.futures.Future[Any], outputs: list[Any], what: str,
                 world: TorchWorld, source: int | Callable[[], int] = -1) -> None:
        super().__init__()
        self._future = future
        self._outputs = outputs
        self._what = what
        self._world = world
        if source != -1:
            self._source = source

    # Each call makes a Work, and most are repeats that ran in the caller's thread
    # (DONE): what they leave as it is, and asyncoll's Work, are made only when asked.
    _source: int | Callable[[], int] = -1
    _torch_future: Any = None
    _settled: Any = None
    #: Whether a thread has taken on completing the torch future (it is done once).
    _claimed = False

    @functools.cached_property
    def _work(self) -> Work:
        return Work(self._future, self._what)

    def wait(self, timeout: timedelta | float | None = None) -> bool:
        """Block until the operation completes; return True or raise its error.

        Args:
            timeout: at most this long (a timedelta or seconds; zero or None: as
                long as the operation's own deadline allows).

        Raises:
            DistBackendError: still running after ``timeout`` (it goes on), or the
                operation failed: asyncoll's error as torch's, both classes
                (asyncoll._torch_backend.errors), caused by asyncoll's own.
        """
        if self._future is DONE and self._torch_future is None:
            return True  # a repeat that ran in this thread: nothing to wait for or settle
        limit = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        try:
            return self._work.wait(limit if limit else None)
        except AsyncollError as exc:
            raise torch_error(exc) from exc
        finally:
            if self._torch_future is not None and self._work.is_completed():
                self._settle()

    def is_completed(self) -> bool:
        """Whether the operation has finished, successfully or not (its torch future is
        then done too)."""
        done = self._work.is_completed()
        if done and self._torch_future is not None:
            self._settle()
        return done

    def is_success(self) -> bool:
        """Whether the operation has finished without error."""
        return self._work.is_success()

    def exception(self) -> BaseException | None:
        """The operation's error, in torch's terms, once it has failed; else None."""
        error = self._work.exception()
        return None if error is None else torch_error(error)

    def result(self) -> list[Any]:
        """The output tensors (valid once the operation has completed)."""
        return self._outputs

    def source_rank(self) -> int:
        """For a receive, the group rank of the sender (-1 until a receive from any
        source has completed)."""
        return self._source() if callable(self._source) else self._source

    def _source_rank(self) -> int:
        return self.source_rank()

    def synchronize(self) -> None:
        """Nothing to do on the CPU."""

    def block_current_stream(self) -> None:
        """Nothing to do on the CPU."""

    def get_future(self) -> Any:
        """A torch.futures.Future completing with the output tensors, or failing; done
        already when the operation has finished.

        A failure is the future's error, as torch's C++ callers (DDP's reducer)
        read it: torch's Python ``set_exception`` would instead complete the
        future with the exception as its value, which they take for tensors
        (a crash). Its ``wait()`` raises a RuntimeError carrying asyncoll's
        message, as gloo's does.
        """
        with _SETTLING:
            made = self._torch_future is None
            if made:
                settled = self._settled = torch.futures.Future()
                # A callback of then() that raises fails the future then() returns.
                # Set last: the other methods take it as the sign that both are made.
                self._torch_future = settled.then(self._outcome)
        if made:
            if self._work.is_completed():
                self._settle()  # nothing is chained on it yet: this is quick
            else:
                self._work.get_future().add_done_callback(self._settle_later)
        return self._torch_future

    def _outcome(self, _: Any) -> list[Any]:
        error = self._work.exception()
        if error is not None:
            raise torch_error(error)
        return self._outputs

    def _settle_later(self, done: concurrent.futures.Future[Any]) -> None:
        # Runs on the loop thread (or here, when already done); the torch
        # future's callbacks must run elsewhere.
        self._world.complete_later(self._settle)

    def _settle(self) -> None:
        """Complete the torch future of the finished operation, once; return when it is
        done, whichever thread completes it."""
        with _SETTLING:
            claimed, self._claimed = not self._claimed, True
        if claimed:
            # Runs _outcome, which completes the future then() gave, and its callbacks.
            self._settled.set_result(None)
        elif not self._torch_future.done():
            # Another thread is completing it: wait() gives the GIL up while it waits.
            with contextlib.suppress(RuntimeError):
                self._torch_future.wait()

    def __repr__(self) -> str:
        state = "completed" if self._work.is_completed() else "running"
        return f"<AsyncollWork {self._what} {state}>"

