"""The coordinator's asyncio server, in the test's own event loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._wire.messages import Join
from asyncoll.coordinator import Coordinator
from asyncoll.errors import RendezvousError

pytestmark = pytest.mark.timeout(30)


async def test_stop_with_connected_peers_fails_their_requests_and_logs_no_error(caplog):
    coordinator = Coordinator("127.0.0.1", 0)
    await coordinator.start()
    client = await CoordinatorClient.connect("127.0.0.1", coordinator.port, timeout=5)
    join = Join(job="j", rank=0, world_size=2, host="127.0.0.1", port=1, hostname="h",
                pid=1, version=PROTOCOL_VERSION, timeout=30.0)
    waiting = asyncio.ensure_future(client.request(join, 30, "rendezvous"))
    await asyncio.sleep(0.1)
    assert coordinator.job_is_active("j")

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        await coordinator.stop()
        with pytest.raises(RendezvousError, match="closed the connection"):
            await asyncio.wait_for(waiting, 5)
        await client.close()
        await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_two_coordinators_cannot_share_a_port():
    first = Coordinator("127.0.0.1", 0)
    await first.start()
    second = Coordinator("127.0.0.1", first.port)
    with pytest.raises(OSError):
        await second.start()
    await first.stop()
