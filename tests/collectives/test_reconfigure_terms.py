"""A reconfigure to a given membership: named processes (in order or not), or all but some.

What the torch backend's reconfigure and shrink_group are built on
(asyncoll._torch_backend.fault_tolerance). Ranks run in this process (one
event loop, a real coordinator, real peers).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import numpy as np
import pytest

from asyncoll._runtime import hosting
from asyncoll._runtime.init_method import resolve
from asyncoll._runtime.runtime import runtime
from asyncoll._runtime.session import Rendezvous, Session
from asyncoll._runtime.settings import Settings
from asyncoll.aio import World
from asyncoll.coordinator.server import Coordinator
from asyncoll.errors import (
    ConfigurationError,
    MismatchError,
    RendezvousError,
    RendezvousTimeoutError,
)
from handshake import until

pytestmark = pytest.mark.timeout(60)


@dataclasses.dataclass
class Job:
    worlds: list[World]
    settings: Settings
    port: int
    coordinator: Coordinator

    def reconfiguring(self, rank: int) -> bool:
        """Whether the coordinator holds rank ``rank``'s call of reconfigure."""
        return any(rank in gathering.arrivals
                   for job in self.coordinator._state.jobs() if job.name == "terms"
                   for key, gathering in job.gatherings.items() if key[0] == "reconfigure")

    def where(self, rank: int, token: str = "") -> Rendezvous:
        return dataclasses.replace(resolve(
            None, f"tcp://127.0.0.1:{self.port}", len(self.worlds) or 3, rank, 20.0,
            "terms", self.settings.environment, True, 0, 0), token=token)


@pytest.fixture
async def job() -> AsyncIterator[Job]:
    """Three members of an elastic job."""
    settings = Settings.from_environment()
    coordinator = await hosting.start("127.0.0.1", 0, settings.token)
    made = Job([], settings, coordinator.port, coordinator)
    try:
        made.worlds = [World(s) for s in await asyncio.gather(
            *(runtime().join(made.where(r), settings) for r in range(3)))]
        yield made
    finally:
        for world in made.worlds:
            await world.session.close()
        await coordinator.stop()


async def sums(worlds: list[World]) -> list[float]:
    values = [np.full(2, w.rank + 1.0) for w in worlds]
    await asyncio.gather(*(w.all_reduce(v) for w, v in zip(worlds, values)))
    return [float(v[0]) for v in values]


def tokens(worlds: list[World]) -> tuple[str, ...]:
    return tuple(w.session.token for w in worlds)


async def reconfigured(sessions: list[Session], **terms: object) -> list[World]:
    return [World(s) for s in await asyncio.gather(
        *(s.reconfigure(10.0, **terms) for s in sessions))]  # type: ignore[arg-type]


async def test_a_list_of_handles_ranks_the_processes_in_its_order(job: Job) -> None:
    old = job.worlds
    named = tokens(old)[::-1]
    new = await reconfigured([w.session for w in old], named=named, ordered=True, uuid=1)
    assert [(w.rank, w.size) for w in new] == [(2, 3), (1, 3), (0, 3)]
    assert [w.session.token for w in sorted(new, key=lambda w: w.rank)] == list(named)
    assert await sums(new) == [6.0] * 3
    job.worlds = new


async def test_a_set_of_handles_keeps_the_survivors_order_and_admits_a_named_newcomer(
        job: Job) -> None:
    old = job.worlds
    joining = asyncio.ensure_future(runtime().join(job.where(-1, token="newcomer"),
                                                   job.settings))
    # Rank 1 is not named: the others go on without it, and add the newcomer.
    named = (old[2].session.token, "newcomer", old[0].session.token)
    kept = [old[0], old[2]]
    new = await reconfigured([w.session for w in kept], named=named, ordered=False, uuid=2)
    newcomer = World(await joining)
    assert [(w.rank, w.size) for w in [*new, newcomer]] == [(0, 3), (1, 3), (2, 3)]
    assert await sums([*new, newcomer]) == [6.0] * 3
    with pytest.raises(RendezvousError, match="rank 1 .* was not named by the reconfigure"):
        await old[1].session.reconfigure(5.0)
    job.worlds = [*new, newcomer, old[1]]


async def test_a_shrink_goes_on_without_a_lost_rank(job: Job) -> None:
    old = job.worlds
    await old[1].session.client.close()  # lost: its coordinator link breaks
    new = await reconfigured([old[0].session, old[2].session], without=(1,), uuid=3)
    assert [(w.rank, w.size) for w in new] == [(0, 2), (1, 2)]
    assert await sums(new) == [3.0, 3.0]
    job.worlds = [*new, old[1]]


async def test_members_that_ask_for_other_memberships_are_refused(job: Job) -> None:
    old = job.worlds
    first = asyncio.ensure_future(old[0].session.reconfigure(2.0, without=(2,), uuid=4))
    await until(lambda: job.reconfiguring(0), "rank 0's call reaching the coordinator")
    with pytest.raises(MismatchError, match="every member must pass the same membership"):
        await old[1].session.reconfigure(2.0, without=(0,), uuid=4)
    with pytest.raises(RendezvousTimeoutError, match="ranks 1 did not call it"):
        await first


async def test_a_caller_the_handles_do_not_name_is_told_so(job: Job) -> None:
    with pytest.raises(ConfigurationError, match="whose handles do not name it"):
        await job.worlds[0].session.reconfigure(5.0, named=tokens(job.worlds[1:]))
    with pytest.raises(ConfigurationError, match="a shrink that leaves it out"):
        await job.worlds[0].session.reconfigure(5.0, without=(0,))


async def test_a_handle_of_no_process_times_out_naming_it(job: Job) -> None:
    named = (*tokens(job.worlds), "nobody")
    with pytest.raises(RendezvousTimeoutError, match="name no member or pending process.*"
                                                     "'nobody'"):
        await asyncio.gather(*(w.session.reconfigure(1.0, named=named)
                               for w in job.worlds))


async def test_a_set_may_come_in_any_order_from_each_member(job: Job) -> None:
    named = tokens(job.worlds)
    orders = [named, named[::-1], named[1:] + named[:1]]
    new = [World(s) for s in await asyncio.gather(
        *(w.session.reconfigure(10.0, named=order, uuid=5)
          for w, order in zip(job.worlds, orders)))]
    assert [(w.rank, w.size) for w in new] == [(0, 3), (1, 3), (2, 3)]
    job.worlds = new
