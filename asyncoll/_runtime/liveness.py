"""A session's peers judged without the coordinator, over the data connections."""

from __future__ import annotations

import asyncio

from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._transport.tcp.mesh import TcpMesh


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
