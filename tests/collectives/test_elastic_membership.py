"""membership_changed() on asyncoll.aio's world: the coordinator is asked only when needed.

Ranks run in this process (one event loop, a real coordinator, real peers).
Every member gets the same answer; when no member has heard of a change it is
a small all_reduce and the coordinator is not asked (counted here at the
session's coordinator call).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from asyncoll._runtime import hosting
from asyncoll._runtime.init_method import resolve
from asyncoll._runtime.runtime import runtime
from asyncoll._runtime.session import Session
from asyncoll._runtime.settings import Settings
from asyncoll.aio import World
from handshake import until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per membership check sent to the coordinator, by any rank."""
    calls: list[int] = []
    ask = Session.membership_changed

    async def counting(self: Session, timeout: float) -> bool:
        calls.append(self.rank)
        return await ask(self, timeout)

    monkeypatch.setattr(Session, "membership_changed", counting)
    return calls


async def changed(worlds: list[World]) -> list[bool]:
    return list(await asyncio.gather(*(w.membership_changed() for w in worlds)))


async def test_membership_changed_asks_the_coordinator_only_after_an_event(asked):
    settings = Settings.from_environment()
    coordinator = await hosting.start("127.0.0.1", 0, settings.token)
    url = f"tcp://127.0.0.1:{coordinator.port}"

    def where(rank: int):
        return resolve(None, url, 3, rank, 20.0, "elastic", settings.environment, True, 0, 0)

    try:
        worlds = [World(s) for s in await asyncio.gather(
            *(runtime().join(where(r), settings) for r in range(3)))]
        # The first check of a generation asks (nothing agreed yet), then none do.
        assert await changed(worlds) == [False] * 3 and len(asked) == 3
        for _ in range(5):
            assert await changed(worlds) == [False] * 3
        assert len(asked) == 3

        joining = asyncio.ensure_future(runtime().join(where(-1), settings))
        await until(lambda: all(w.session.heard_of_change() for w in worlds),
                    "the coordinator's notice of the pending process")
        assert await changed(worlds) == [True] * 3 and len(asked) == 6
        newer = list(await asyncio.gather(*(w.reconfigure() for w in worlds)))
        everyone = newer + [World(await joining)]
        assert [(w.rank, w.size) for w in everyone] == [(r, 4) for r in range(4)]
        sums = [np.full(2, w.rank + 1.0) for w in everyone]
        await asyncio.gather(*(w.all_reduce(s) for w, s in zip(everyone, sums)))
        assert [s[0] for s in sums] == [10.0] * 4
        assert await changed(everyone) == [False] * 4 and len(asked) == 10
        assert await changed(everyone) == [False] * 4 and len(asked) == 10

        # Rank 3 is lost: its coordinator link breaks without leaving.
        await everyone[3].session.client.close()
        assert await changed(everyone[:3]) == [True] * 3
        survivors = list(await asyncio.gather(*(w.reconfigure() for w in everyone[:3])))
        await everyone[3].session.mesh.close()
        assert await changed(survivors) == [False] * 3
        # Rank 2 leaves (destroy_process_group): a change too.
        await survivors[2].destroy()
        assert await changed(survivors[:2]) == [True] * 2
        await asyncio.gather(*(w.destroy() for w in survivors[:2]))
    finally:
        await coordinator.stop()
