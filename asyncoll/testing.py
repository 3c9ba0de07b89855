"""Helpers for testing code that uses asyncoll: N ranks in one event loop.

```python
async def body(world):
    x = np.full(4, world.rank, dtype=np.int64)
    await world.all_reduce(x)
    return x

results = await run_ranks(3, body)   # one result per rank, rank order
```

The ranks are real peers over loopback TCP with a real coordinator; only
the processes are shared.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

from asyncoll._compat import timeout as timeout_after
from asyncoll._runtime.init_method import resolve
from asyncoll._runtime import hosting
from asyncoll._runtime.runtime import runtime
from asyncoll._runtime.settings import Settings, settings_at_join
from asyncoll._wire.endpoint import join_host_port
from asyncoll.aio import World
from asyncoll.group import seconds

__all__ = ["run_ranks"]

T = TypeVar("T")
_jobs = itertools.count(1)
#: The hosts run_ranks' ranks pretend to run on, unless told (a test suite may
#: set it to run every test across hosts).
PRETEND_HOSTS = 1
#: The loopback address run_ranks' coordinator and ranks use, unless told (a
#: test suite may set it to `"::1"` to run every test over IPv6).
LOOPBACK = "127.0.0.1"


def has_ipv6_loopback() -> bool:
    """Whether this host can bind its IPv6 loopback address (`::1`)."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


async def run_ranks(world_size: int, body: Callable[[World], Awaitable[T]], *,
                    timeout: float = 60.0, op_timeout: float = 30.0,
                    hosts: int | None = None, loopback: str | None = None) -> list[T]:
    """Run `body(world)` on `world_size` ranks at once; return their results by rank.

    Args:
        world_size: number of ranks.
        body: the coroutine function each rank runs with its World.
        timeout: deadline for the whole run, in seconds.
        op_timeout: the ranks' rendezvous and per-operation timeout.
        hosts: the hosts the ranks pretend to run on, consecutive ranks on each
            (their hostnames differ, as ASYNCOLL_HOSTNAME makes them): ranks of
            different hosts share no memory. By default `PRETEND_HOSTS`.
        loopback: the address the coordinator listens on, which the ranks join
            and so advertise to each other (`"::1"`: IPv6). By default
            `LOOPBACK`.

    Raises:
        Exception: whatever the first failing rank raised; the others are cancelled.
    """
    # Read once for every rank, as each process of a real job would at its start.
    settings = settings_at_join()
    hosts = min(hosts or PRETEND_HOSTS, world_size)
    host = loopback or LOOPBACK
    coordinator = await hosting.start(host, 0, settings.token, settings.tls)
    job = f"test-{next(_jobs)}"
    try:
        async with timeout_after(timeout):
            url = f"tcp://{join_host_port(host, coordinator.port)}"
            joining = [runtime().join(resolve(None, url,
                                              world_size, rank, seconds(op_timeout, 0), job,
                                              settings.environment),
                                      _on_host(settings, rank * hosts // world_size, hosts))
                       for rank in range(world_size)]
            worlds = [World(session) for session in await asyncio.gather(*joining)]
            try:
                return list(await asyncio.gather(*(body(world) for world in worlds)))
            finally:
                await asyncio.gather(*(world.destroy() for world in worlds))
    finally:
        await coordinator.stop()


def _on_host(settings: Settings, host: int, hosts: int) -> Settings:
    """`settings` of a rank on pretend host `host` of `hosts` (1: the real one)."""
    if hosts == 1:
        return settings
    return dataclasses.replace(settings, hostname=f"{socket.gethostname()}~{host}")
