"""Small shims so asyncoll runs on Python 3.10 as well as 3.11+."""

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

    @asynccontextmanager
    async def timeout(delay: float | None) -> AsyncIterator[None]:
        """Cancel the enclosed block after ``delay`` seconds and raise TimeoutError."""
        if delay is None:
            yield
            return
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        handle = asyncio.get_running_loop().call_later(delay, expire)
        try:
            yield
        except asyncio.CancelledError:
            if expired:
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
