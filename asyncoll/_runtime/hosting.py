"""Coordinators a process hosts for its own job: every front door starts them here.

Three policies, one start: env:// with RANK=0 hosts at MASTER_ADDR:MASTER_PORT
unless something listens there already (as torch's rank 0 hosts its TCPStore);
the torch backend's rank 0 hosts on a free port of the address its peers reach;
asyncoll-run and ``testing.run_ranks`` host where they are told. Each runs on the
caller's event loop and is stopped by whoever holds it (a Session stops the one
it was given when it closes).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging

from asyncoll._compat import timeout as timeout_after
from asyncoll._defaults import HANDSHAKE_TIMEOUT_S
from asyncoll._tls.context import Tls
from asyncoll._wire.endpoint import join_host_port, wildcard
from asyncoll.coordinator.server import Coordinator
from asyncoll.errors import RendezvousError

log = logging.getLogger("asyncoll")


async def start(host: str, port: int, token: bytes | None,
                tls: Tls | None = None) -> Coordinator:
    """Start a coordinator listening on ``host:port`` (0: a free port), with ``tls`` if set.

    Raises:
        OSError: it cannot listen there.
    """
    coordinator = Coordinator(host, port, token, tls)
    await coordinator.start()
    return coordinator


async def host_unless_listening(host: str, port: int, token: bytes | None,
                                tls: Tls | None = None) -> Coordinator | None:
    """Host the coordinator at ``host:port`` unless something listens there.

    This is env:// with RANK=0. A daemon already listening there is used
    instead (None), and so is one another process starts at the same moment.

    Raises:
        RendezvousError: the address is not this machine's, or cannot be bound.
    """
    with contextlib.suppress(OSError, TimeoutError):
        async with timeout_after(HANDSHAKE_TIMEOUT_S):
            _, probe = await asyncio.open_connection(host, port)
        probe.close()
        return None
    try:
        coordinator = await start(host, port, token, tls)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return None  # another process won the race; use its coordinator
        raise RendezvousError(f"RANK=0 could not host the coordinator at "
                              f"{join_host_port(host, port)}: {exc}; check MASTER_ADDR (it "
                              "must be an address of this machine) and MASTER_PORT") from exc
    log.info("rank 0 hosts the coordinator at %s", join_host_port(host, coordinator.port))
    return coordinator


async def host_advertised(host: str, token: bytes | None,
                          tls: Tls | None = None) -> Coordinator:
    """Host a coordinator on a free port, reached by the other ranks at ``host``.

    Where ``host`` is not an address of this machine (NAT, a container), it
    listens on every interface and advertises ``host`` all the same.

    Raises:
        RendezvousError: it cannot listen.
    """
    try:
        return await start(host, 0, token, tls)
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            raise RendezvousError(f"rank 0 could not start asyncoll's coordinator on "
                                  f"{host}: {exc}") from exc
    coordinator = await start(wildcard(host), 0, token, tls)
    coordinator.host = host
    return coordinator
