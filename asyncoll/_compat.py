"""Small shims so asyncoll runs alike on every Python from 3.10 on.

``timeout(delay)`` is asyncio's: ``async with timeout(s) as deadline`` and,
in ``except TimeoutError``, ``deadline.expired()`` tells this deadline's
expiry from another TimeoutError raised inside (catch only your own).

``close_server(server, ...)`` stops a listener the same way on every Python,
although Python 3.12 changed what ``Server.wait_closed()`` waits for.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import AsyncIterator, Protocol

__all__ = ["close_server", "loop_factory", "timeout"]

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


class _Listener(Protocol):
    """What close_server needs of a listener: asyncio.Server's close and wait_closed."""

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


async def close_server(server: _Listener, what: str, deadline_s: float,
                       log: logging.Logger) -> None:
    """Stop ``server`` listening, and wait until it has stopped.

    The caller closes the connections it accepted first. Since Python 3.12,
    ``wait_closed()`` also waits for each of those to finish closing; one still
    open after ``deadline_s`` is abandoned with a warning naming ``what``, so
    that a connection leaked by a bug is seen rather than waited out in silence.
    """
    server.close()
    try:
        async with timeout(deadline_s) as deadline:
            await server.wait_closed()
    except TimeoutError:
        if not deadline.expired():
            raise
        log.warning("%s: a connection it accepted was still open %s s after it was closed; "
                    "stopped without waiting for it", what, deadline_s)
