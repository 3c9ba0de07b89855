"""Closing a group's fast path while an operation may still run on it in another thread.

A fast path (an arena, direct links) is closed when its group is destroyed,
its job left or reconfigured. Its memory and sockets go at once, on every
member: nothing waits for the garbage collector. An operation running on
the path in another thread holds the path's lock; the closer marks the path
closing, which makes that operation's waits give up at their next check
(ClosedError), and waits for the lock up to CLOSE_WAIT_S. Where the
operation does not end in time (a thread stopped in a debugger, say), the
closer goes on and the operation's own end closes the path
(Runner.on_fast_path), so nothing is unmapped under a running operation.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Protocol

from asyncoll._defaults import CLOSE_WAIT_S
from asyncoll.errors import ClosedError

log = logging.getLogger("asyncoll")


class PathLock(Protocol):
    """What a fast path's lock offers: threading.Lock's, or the compiled PathLock's
    (asyncoll/_native/lock.c), which has the same methods."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock (see threading.Lock.acquire): whether it was taken."""

    def release(self) -> None:
        """Give the lock back."""


def close_under(lock: PathLock, let_go: Callable[[], None], what: str,
                wait_s: float = CLOSE_WAIT_S) -> bool:
    """Run ``let_go()`` holding ``lock``, once the operation holding it (if any) has ended.

    Returns False, having run nothing, where that operation did not end within
    ``wait_s`` seconds: its end must run it.
    """
    if not lock.acquire(timeout=wait_s):
        log.warning("%s stays open until the operation running on it in another thread "
                    "ends (it did not end within %g s of the close)", what, wait_s)
        return False
    try:
        let_go()
    finally:
        lock.release()
    return True


def destroyed(group_id: int, operation: int) -> ClosedError:
    """The error of an operation whose group this rank closed while it ran."""
    return ClosedError(f"group {group_id} was destroyed on this rank while its operation "
                       f"#{operation} ran")


def drop_frames(error: BaseException) -> None:
    """Clear the ended frames of ``error``'s traceback, and of the errors it chains.

    A failed operation's frames hold what its kernel held (the pure-Python
    arena's views of its slots), and the error lives on (the group's first
    failure is kept): cleared before the path's lock is released, so that a
    close can unmap the path's memory. The frames' lines stay in the traceback.
    """
    seen: set[int] = set()
    chained: BaseException | None = error
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        traceback.clear_frames(chained.__traceback__)
        chained = chained.__cause__ or chained.__context__
