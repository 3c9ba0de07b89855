"""AsyncollWork: what the torch backend's collectives return, as torch's Work.

It wraps asyncoll's own Work (asyncoll._api.work), which waits and reports errors:
``wait()`` blocks and re-raises the operation's asyncoll error unchanged;
``get_future()`` gives a torch Future that completes with the output tensors
(DDP's reducer chains its gradient averaging onto it), or with the error.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from asyncoll._torch_backend.world import TorchWorld
from asyncoll._api.work import Work

_WorkBase: Any = dist.distributed_c10d.Work


class AsyncollWork(_WorkBase):  # type: ignore[misc]
    """An asyncoll operation running on the loop thread, seen through torch's Work."""

    def __init__(self, future: concurrent.futures.Future[Any], outputs: list[Any], what: str,
                 world: TorchWorld, source: int | Callable[[], int] = -1) -> None:
        super().__init__()
        self._work = Work(future, what)
        self._outputs = outputs
        self._what = what
        self._world = world
        self._source = source
        self._torch_future: Any = None
        self._settled: Any = None
        self._lock = threading.Lock()

    def wait(self, timeout: timedelta | float | None = None) -> bool:
        """Block until the operation completes; return True or raise its error.

        Args:
            timeout: at most this long (a timedelta or seconds; zero or None: as
                long as the operation's own deadline allows).

        Raises:
            CollectiveTimeoutError: still running after ``timeout`` (it goes on).
            AsyncollError: the operation failed; the error is asyncoll's, unchanged.
        """
        limit = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        return self._work.wait(limit if limit else None)

    def is_completed(self) -> bool:
        """Whether the operation has finished, successfully or not."""
        return self._work.is_completed()

    def is_success(self) -> bool:
        """Whether the operation has finished without error."""
        return self._work.is_success()

    def exception(self) -> BaseException | None:
        """The operation's error once it has failed, else None."""
        return self._work.exception()

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
        """A torch.futures.Future completing with the output tensors, or failing.

        A failure is the future's error, as torch's C++ callers (DDP's reducer)
        read it: torch's Python ``set_exception`` would instead complete the
        future with the exception as its value, which they take for tensors
        (a crash). Its ``wait()`` raises a RuntimeError carrying asyncoll's
        message, as gloo's does; ``Work.wait()`` raises asyncoll's error itself.
        """
        with self._lock:
            if self._torch_future is None:
                self._settled = torch.futures.Future()
                # A callback of then() that raises fails the future then() returns.
                self._torch_future = self._settled.then(self._outcome)
                self._work.get_future().add_done_callback(self._settle_later)
            return self._torch_future

    def _outcome(self, _: Any) -> list[Any]:
        error = self._work.exception()
        if error is not None:
            raise error
        return self._outputs

    def _settle_later(self, done: concurrent.futures.Future[Any]) -> None:
        # Runs on the loop thread (or here, when already done); the torch
        # future's callbacks run on the world's completion thread instead.
        self._world.complete_later(lambda: self._settled.set_result(None))

    def __repr__(self) -> str:
        state = "completed" if self._work.is_completed() else "running"
        return f"<AsyncollWork {self._what} {state}>"

