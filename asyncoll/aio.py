"""The asyncio face of asyncoll: the same operations as coroutines.

```python
from asyncoll import aio

async def main():
    async with await aio.init_process_group(init_method="tcp://127.0.0.1:29500",
                                            world_size=2, rank=rank) as world:
        await world.all_reduce(x)
        pair = await world.new_group([0, 1])
        await pair.all_reduce(y, op=aio.ReduceOp.MAX)
```

Everything runs in the caller's event loop; nothing here blocks it.
"""

from __future__ import annotations

from datetime import timedelta
from types import TracebackType
from typing import Sequence

import numpy as np

from asyncoll._runtime.init_method import resolve
from asyncoll._runtime.runtime import runtime
from asyncoll._runtime.settings import settings_at_join
from asyncoll._runtime.session import Session
from asyncoll._defaults import DEFAULT_TIMEOUT_S
from asyncoll._wire.status import StragglerStatus
from asyncoll.errors import CollectiveError, ConfigurationError
from asyncoll.group import AsyncProcessGroup, seconds
from asyncoll.types import ReduceOp

__all__ = ["AsyncProcessGroup", "ReduceOp", "World", "init_process_group"]


class World(AsyncProcessGroup):
    """The group of every rank in the job; also creates sub-groups and ends the job."""

    def __init__(self, session: Session) -> None:
        super().__init__(session, 0, range(session.world_size), session.timeout)
        self.session = session

    async def new_group(self, ranks: Sequence[int] | None = None,
                        timeout: float | timedelta | None = None) -> AsyncProcessGroup:
        """Create a group of `ranks` (all ranks when None); every rank must call it.

        Every rank calls new_group in the same order with the same ranks, members
        or not, as in torch. The group's ranks keep the order given.

        Raises:
            ConfigurationError: ranks that are not distinct ranks of this job.
            MismatchError: ranks passed different member lists to the same call.
            RendezvousTimeoutError: some rank did not call it within the timeout.
        """
        members = tuple(range(self.size)) if ranks is None else tuple(ranks)
        bad = [r for r in members if isinstance(r, bool) or not isinstance(r, int)
               or not 0 <= r < self.size]
        if bad or len(set(members)) != len(members) or not members:
            raise ConfigurationError(f"new_group ranks {list(members)} must be distinct ranks "
                                     f"between 0 and {self.size - 1}, at least one")
        limit = seconds(timeout, self.timeout)
        group_id, agreed = await self.session.new_group(members, limit)
        return AsyncProcessGroup(self.session, group_id, agreed, limit)

    async def membership_changed(self, timeout: float | timedelta | None = None) -> bool:
        """Whether a member was lost or left, or a process waits to join (elastic jobs).

        Every live member calls it; all get the same answer. When no member
        has heard of a change it is one small all_reduce; otherwise the
        coordinator decides, once for all (a member lost meanwhile does not
        hold it up).
        """
        limit = seconds(timeout, self.timeout)
        heard = np.array([self.session.heard_of_change()], dtype=np.int32)
        try:
            await self.all_reduce(heard, ReduceOp.MAX, limit)
        except CollectiveError as exc:
            if not self.session.changed_membership(exc):
                raise
            heard[0] = 1  # lost or left, meanwhile or before: the coordinator gathers all
        return bool(heard[0]) and await self.session.membership_changed(limit)

    async def straggler_report(self, timeout: float | timedelta | None = None
                               ) -> list[StragglerStatus]:
        """Each group's straggler, as the coordinator sees them from every rank's sampled
        arrival times (empty: none); see asyncoll.get_straggler_report."""
        return list(await self.session.stragglers(seconds(timeout, self.timeout)))

    async def reconfigure(self, timeout: float | timedelta | None = None) -> World:
        """Go on with the live members and admit the pending processes: the next world.

        Every live member calls it (the pending processes are waiting in
        init_process_group). Survivors keep their order, numbered from 0;
        newcomers follow. Returns the new World; this one and every group
        made from it are closed (calls raise ClosedError): make groups anew.

        Raises:
            ConfigurationError: the job is not elastic.
            RendezvousTimeoutError: fewer than min_size members took part in time.
            ExcludedError: the others went on without this process (it was late).
        """
        return World(await self.session.reconfigure(seconds(timeout, self.timeout)))

    @property
    def generation(self) -> int:
        """The job's membership generation: 0, then one more per reconfigure."""
        return self.session.generation

    async def destroy(self) -> None:
        """Leave the job and close every connection. Never raises."""
        await self.session.close()

    async def __aenter__(self) -> World:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.destroy()


async def init_process_group(backend: str | None = None, init_method: str | None = None,
                             timeout: float | timedelta | None = None, world_size: int = -1,
                             rank: int = -1, job_id: str | None = None,
                             elastic: bool | None = None, min_size: int | None = None,
                             max_size: int | None = None) -> World:
    """Join a job and return its World group, as torch.distributed.init_process_group.

    Args:
        backend: None, "asyncoll" or "gloo" (accepted so torch programs run).
        init_method: "env://" (default: MASTER_ADDR, MASTER_PORT, WORLD_SIZE,
            optional RANK) or "tcp://host:port".
        timeout: rendezvous deadline and the default timeout of every operation
            (seconds or a timedelta; default 30 minutes, as torch).
        world_size: number of processes; -1 reads WORLD_SIZE.
        rank: this process's rank; -1 reads RANK, or lets the coordinator choose.
        job_id: the job to join on a shared coordinator (default: ASYNCOLL_JOB_ID,
            else "default").
        elastic: the job goes on when members are lost (reconfigure), and a
            process that joins it while it runs waits, pending, until a
            reconfigure admits it (default: ASYNCOLL_ELASTIC=1). Elastic jobs
            need a coordinator that outlives every worker (a daemon, or asyncoll-run's).
        min_size: an elastic job's least size (default: ASYNCOLL_MIN_SIZE; 0: none),
            as torchrun's --nnodes MIN:MAX.
        max_size: an elastic job's greatest size (default: ASYNCOLL_MAX_SIZE; 0: none).

    Raises:
        ConfigurationError: bad arguments or environment, or refused by the coordinator.
        RendezvousTimeoutError: the world was not complete within the timeout.
        RendezvousError: the coordinator refused this peer or is unreachable.
    """
    settings = settings_at_join()
    where = resolve(backend, init_method, world_size, rank,
                    seconds(timeout, DEFAULT_TIMEOUT_S), job_id, settings.environment,
                    elastic, min_size, max_size)
    return World(await runtime().join(where, settings))
