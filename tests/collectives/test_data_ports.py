"""The data port honours ASYNCOLL_DATA_PORTS and ASYNCOLL_ADVERTISE_ADDR in a real job."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from asyncoll.errors import ConfigurationError
from asyncoll.testing import run_ranks

pytestmark = pytest.mark.timeout(60)


def held_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


async def test_data_ports_come_from_the_configured_range(monkeypatch):
    with held_port() as busy:
        first = busy.getsockname()[1]
        # The first port of the range is taken: the ranks use the next ones.
        monkeypatch.setenv("ASYNCOLL_DATA_PORTS", f"{first}-{first + 20}")

        async def body(world):
            x = np.ones(5, dtype=np.int32)
            await world.all_reduce(x)
            return world.session.mesh.port, x.tolist()

        results = await run_ranks(2, body)
    ports = [port for port, _ in results]
    assert all(first < port <= first + 20 for port in ports) and len(set(ports)) == 2
    assert all(x == [2] * 5 for _, x in results)


async def test_a_full_port_range_is_a_configuration_error_naming_it(monkeypatch):
    with held_port() as busy:
        port = busy.getsockname()[1]
        monkeypatch.setenv("ASYNCOLL_DATA_PORTS", f"{port}-{port}")
        with pytest.raises(ConfigurationError, match=f"at ports {port}-{port}"):
            await run_ranks(1, lambda world: world.barrier())


async def test_peers_dial_the_advertised_address_not_the_coordinator_side(monkeypatch):
    # The coordinator is reached over 127.0.0.1; 127.0.0.2 is another loopback
    # address, so only the override can make the peers use it.
    monkeypatch.setenv("ASYNCOLL_ADVERTISE_ADDR", "127.0.0.2")

    async def body(world):
        x = np.ones(3, dtype=np.float64)
        await world.all_reduce(x)
        other = world.session.mesh.peer_address(1 - world.rank)
        return x.tolist(), other[0] if other else None

    assert await run_ranks(2, body) == [([2.0] * 3, "127.0.0.2")] * 2
