"""A rank's liveness: the heartbeat it sends the coordinator, and its peers judged
without the coordinator, over the data connections."""

from __future__ import annotations

import asyncio
import time

from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll._wire.messages import Heartbeat


async def keep_alive(client: CoordinatorClient, mesh: TcpMesh, deadline: float,
                     tick: float) -> None:
    """Every ``tick`` seconds while no coordinator answers (it is gone, or being
    reached again), probe the peers this rank waits for over the data connections
    (asyncoll._transport.tcp.keepalive): one silent for ``deadline`` seconds (the
    job's heartbeat deadline) is lost, as the coordinator would have declared it.

    While a coordinator answers, it alone judges, from the heartbeats: every member
    then hears the same verdict.
    """
    while True:
        if client.up:
            mesh.keepalive.stop()
        else:
            mesh.probe(deadline, 2 * tick)
        await asyncio.sleep(tick)


def heartbeat(ops: int, doing: tuple[int, int, str, bool, int] | None,
              samples: list[int]) -> Heartbeat:
    """The heartbeat of a rank that started ``ops`` operations, is ``doing`` one (see
    Recorder.report) and sampled ``samples``."""
    clock_us = time.time_ns() // 1000
    if doing is None:
        return Heartbeat(ops=ops, clock_us=clock_us, samples=tuple(samples))
    group_id, seq, collective, running, started_ns = doing
    return Heartbeat(ops=ops, clock_us=clock_us, group_id=group_id, seq=seq,
                     collective=collective, running=int(running),
                     age_us=max(0, clock_us - started_ns // 1000), samples=tuple(samples))
