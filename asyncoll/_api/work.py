"""Work: the handle an `async_op=True` call returns, as torch's Work."""

from __future__ import annotations

import concurrent.futures

from asyncoll.errors import CollectiveTimeoutError, timed_out_words


class Work:
    """A collective running in the background.

    `wait()` blocks until it completes and re-raises its error;
    `is_completed()` polls; `get_future()` gives the underlying
    concurrent.futures.Future.
    """

    def __init__(self, future: concurrent.futures.Future[None], what: str) -> None:
        self._future = future
        self._what = what

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the operation completes; return True.

        Args:
            timeout: seconds to wait at most; None waits as long as the
                operation's own deadline allows.

        Raises:
            CollectiveTimeoutError: still running after `timeout` seconds (it goes on).
            CollectiveError: the operation failed.
        """
        try:
            self._future.result(timeout)
        except concurrent.futures.TimeoutError:
            if self._future.done():
                # The operation's own CollectiveTimeoutError: a TimeoutError too.
                raise
            raise CollectiveTimeoutError(f"{self._what} did not complete within {timeout} s "
                                         "of wait(); it is still running. "
                                         f"{timed_out_words(timeout or 0.0)}") from None
        return True

    def is_completed(self) -> bool:
        """Whether the operation has finished, successfully or not."""
        return self._future.done()

    def is_success(self) -> bool:
        """Whether the operation has finished without error."""
        return self._future.done() and self._future.exception() is None

    def exception(self) -> BaseException | None:
        """The operation's error once it has failed, else None."""
        return self._future.exception() if self._future.done() else None

    def get_future(self) -> concurrent.futures.Future[None]:
        """The concurrent.futures.Future that completes with the operation."""
        return self._future

    def __repr__(self) -> str:
        state = "completed" if self._future.done() else "running"
        return f"<Work {self._what} {state}>"
