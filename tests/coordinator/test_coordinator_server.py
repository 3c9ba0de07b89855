"""The coordinator's asyncio server, in the test's own event loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._wire.messages import Join
from asyncoll.coordinator import Coordinator
from asyncoll.errors import RendezvousTimeoutError
from handshake import until

pytestmark = pytest.mark.timeout(30)


async def test_stop_with_connected_peers_logs_no_error_and_their_requests_meet_deadlines(
        caplog):
    """The peers dial again (a restarted coordinator takes them back): what they asked
    fails at its own deadline, naming the address tried, not at once."""
    coordinator = Coordinator("127.0.0.1", 0)
    await coordinator.start()
    client = await CoordinatorClient.connect("127.0.0.1", coordinator.port, timeout=5)
    join = Join(job="j", rank=0, world_size=2, host="127.0.0.1", port=1, hostname="h",
                pid=1, version=PROTOCOL_VERSION, timeout=30.0)
    waiting = asyncio.ensure_future(client.request(join, 2.0, "rendezvous"))
    await until(lambda: coordinator.job_is_active("j"), "the join reaching the coordinator")

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        await coordinator.stop()
        with pytest.raises(RendezvousTimeoutError,
                           match=rf"rendezvous: no coordinator reachable within 2.0 s \(tried "
                                 rf"127.0.0.1:{coordinator.port}\)"):
            await asyncio.wait_for(waiting, 5)
        assert not client.up and client.lost is None
        await client.close()
        await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_join_waiting_when_the_coordinator_restarts_is_sent_again():
    coordinator = Coordinator("127.0.0.1", 0)
    await coordinator.start()
    port = coordinator.port
    clients = [await CoordinatorClient.connect("127.0.0.1", port, timeout=5) for _ in range(2)]
    joins = [Join(job="j", rank=r, world_size=2, host="127.0.0.1", port=1 + r, hostname="h",
                  pid=1 + r, version=PROTOCOL_VERSION, timeout=30.0) for r in range(2)]
    first = asyncio.ensure_future(clients[0].request(joins[0], 10, "rendezvous"))
    await until(lambda: coordinator.job_is_active("j"), "the join reaching the coordinator")
    await coordinator.stop()
    restarted = Coordinator("127.0.0.1", port)
    await restarted.start()
    try:
        second = await clients[1].request(joins[1], 10, "rendezvous")
        welcome = await asyncio.wait_for(first, 10)
        assert {welcome.rank, second.rank} == {0, 1}  # type: ignore[union-attr]
    finally:
        for client in clients:
            await client.close()
        await restarted.stop()


async def test_two_coordinators_cannot_share_a_port():
    first = Coordinator("127.0.0.1", 0)
    await first.start()
    second = Coordinator("127.0.0.1", first.port)
    with pytest.raises(OSError):
        await second.start()
    await first.stop()
