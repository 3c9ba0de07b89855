"""A member that has left its job lets its coordinator go without a word.

At the end of a job, rank 0's embedded coordinator stops once every member
has left, and a member may not have closed its link yet. Its client used to
take that for a lost coordinator: it warned "reaching a coordinator again",
dialled the job's other coordinators and re-registered with a standing one,
which then logged the member's "disconnected without leaving" (issue 59).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from asyncoll._runtime.session import Rendezvous, Session
from asyncoll._runtime.settings import settings_at_join
from asyncoll.coordinator import Coordinator

pytestmark = pytest.mark.timeout(60)


async def test_a_member_that_left_dials_no_coordinator_when_its_own_stops(caplog) -> None:
    embedded, standing = Coordinator("127.0.0.1", 0), Coordinator("127.0.0.1", 0)
    await embedded.start()
    await standing.start()
    where = Rendezvous("127.0.0.1", embedded.port, "j", 1, 0, 10.0, may_host=False,
                       fallbacks=(("127.0.0.1", standing.port),))
    session = await Session.join(where, settings_at_join())
    close_mesh = session.mesh.close

    async def coordinator_stops_first(goodbye: bool = True) -> None:
        # Between this member's Leave and the closing of its link, as rank 0's does.
        await embedded.stop()
        await asyncio.wait_for(_until(lambda: session.client._reader_task.done()
                                      or standing.job_is_active("j")), 10)
        await close_mesh(goodbye)

    session.mesh.close = coordinator_stops_first  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.INFO):
            await session.close()
        assert not standing.job_is_active("j")
        assert session.client._reader_task.done()
        assert [r.getMessage() for r in caplog.records
                if r.levelno >= logging.WARNING] == []
    finally:
        await standing.stop()
        await embedded.stop()


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)
