"""Small shims so asyncoll runs on Python 3.10 as well as 3.11+.

``timeout(delay)`` is asyncio's: ``async with timeout(s) as deadline`` and,
in ``except TimeoutError``, ``deadline.expired()`` tells this deadline's
expiry from another TimeoutError raised inside (catch only your own).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import AsyncIterator

__all__ = ["loop_factory", "timeout"]

if sys.version_info >= (3, 11):
    from asyncio import timeout
else:  # pragma: no cover - exercised on 3.10 only

    class _Deadline:
        """What ``async with timeout(...) as deadline`` gives, as asyncio.Timeout."""

        def __init__(self) -> None:
            self._expired = False

        def expired(self) -> bool:
            """Whether this deadline (not another one) cancelled the block."""
            return self._expired

    @asynccontextmanager
    async def timeout(delay: float | None) -> AsyncIterator[_Deadline]:
        """Cancel the enclosed block after ``delay`` seconds and raise TimeoutError."""
        deadline = _Deadline()
        if delay is None:
            yield deadline
            return
        task = asyncio.current_task()
        assert task is not None

        def expire() -> None:
            deadline._expired = True
            task.cancel()

        handle = asyncio.get_running_loop().call_later(delay, expire)
        try:
            yield deadline
        except asyncio.CancelledError:
            if deadline.expired():
                raise TimeoutError() from None
            raise
        finally:
            handle.cancel()


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop where it is installed (not on Windows), asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop
