"""gloo's monitored barrier: member 0 hears from every member in turn, then answers all.

torch's ``monitored_barrier`` on gloo (ProcessGroupGloo::monitoredBarrier)
does not involve a coordinator: every other member sends member 0 a token
and waits for its answer; member 0 waits for the tokens in member order,
each within what is left of the timeout, and reports the first member that
did not arrive (or, with ``wait_all_ranks``, every one, each given the whole
timeout). Member 0 answers only when everyone arrived, so the others learn
of a failure as an error while they wait for it. The messages are gloo's,
which torch's own tests and its users' code match on; member numbers are
the group's, as gloo's are.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence

import numpy as np

from asyncoll._algorithms.team import Team
from asyncoll.errors import MonitoredBarrierError

TOKEN, ANSWER = 0, 1


async def monitored_barrier(team: Team, limit_s: float, wait_all_ranks: bool) -> None:
    """Return once every member has arrived; member 0 names who did not.

    Raises:
        MonitoredBarrierError: on member 0, members that did not arrive in
            time (or its own time ran out); on the others, any error while
            waiting for member 0's answer.
    """
    if team.me != 0:
        try:
            team.send(0, TOKEN, np.zeros(1, np.uint8))
            await team.flush()
            await asyncio.wait_for(team.recv(0, ANSWER, np.zeros(1, np.uint8)), limit_s)
        except Exception as exc:  # any failure (a timeout too): gloo's one message
            raise MonitoredBarrierError(
                f"Rank {team.me} successfully reached monitoredBarrier, but received errors "
                f"while waiting for send/recv from rank 0. Please check rank 0 logs for "
                f"faulty rank ({exc})") from exc
        return
    tokens = {i: team.recv(i, TOKEN, np.zeros(1, np.uint8)) for i in range(1, team.size)}
    await _hear_from(tokens, limit_s, wait_all_ranks)
    for i in range(1, team.size):
        team.send(i, ANSWER, np.zeros(1, np.uint8))
    await team.flush()


async def _hear_from(tokens: dict[int, Awaitable[None]], limit_s: float,
                     wait_all_ranks: bool) -> None:
    started = time.monotonic()
    late: list[int] = []
    for member, token in tokens.items():
        left = limit_s if wait_all_ranks else limit_s - (time.monotonic() - started)
        if left <= 0 and not wait_all_ranks:
            raise MonitoredBarrierError(
                f"Rank 0 timed out in monitoredBarrier after {_ms(limit_s)} ms (rank "
                f"{member} had not arrived)")
        try:
            # shield: a receive left posted fails with the group, not here.
            await asyncio.wait_for(asyncio.shield(token), max(left, 0.0))
        except Exception as exc:  # a timeout, or the group failing
            if not wait_all_ranks:
                raise MonitoredBarrierError(f"[Rank 0]: Rank {member} failed to pass "
                                            f"monitoredBarrier in {_ms(limit_s)} ms") from exc
            late.append(member)
    if late:
        raise MonitoredBarrierError(f"[Rank 0]: Ranks {_listed(late)} failed to pass "
                                    f"monitoredBarrier in {_ms(limit_s)} ms")


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _listed(members: Sequence[int]) -> str:
    return ", ".join(map(str, members))
