"""Handshakes between the parts of a test that share one event loop: ranks of
asyncoll.testing.run_ranks, clients and their coordinator.

A part that must act after something happened elsewhere waits for it to be true,
not for time to pass; both waits have a deadline and say what never happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

#: How long a handshake waits, in seconds: far past anything it waits for.
LIMIT_S = 20.0


async def until(condition: Callable[[], bool], what: str, limit: float = LIMIT_S) -> None:
    """Return once ``condition()`` is true, checking at each turn of the loop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not happen within {limit} s")
        await asyncio.sleep(0.005)


async def after(event: asyncio.Event, what: str, limit: float = LIMIT_S) -> None:
    """Return once ``event`` is set."""
    try:
        await asyncio.wait_for(event.wait(), limit)
    except asyncio.TimeoutError:
        raise AssertionError(f"{what} did not happen within {limit} s") from None
