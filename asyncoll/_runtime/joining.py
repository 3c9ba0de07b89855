"""What joining a job needs besides the coordinator's answer: a link to the coordinator,
a data port to listen on, word of who is missing while the rendezvous waits, and the
directory the answer gives."""

from __future__ import annotations

import asyncio
import errno
import logging
from typing import Protocol

from asyncoll._defaults import HANDSHAKE_TIMEOUT_S, OUT_OF_RANGE_REPORT_S
from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._rendezvous.waiting import deadline_text, report_gaps
from asyncoll._runtime.addresses import ListenPlan
from asyncoll._tls.context import Tls
from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll._wire.endpoint import join_host_port, wildcard
from asyncoll._wire.messages import Address, Lookup, MissingReply, Welcome, WhoIsMissing
from asyncoll.errors import (
    AsyncollError,
    ConfigurationError,
    ProtocolError,
    RendezvousTimeoutError,
)

log = logging.getLogger("asyncoll")


class Place(Protocol):
    """Where a rank joins (asyncoll._runtime.session.Rendezvous), as far as reaching its
    coordinator goes."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def fallbacks(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def timeout(self) -> float: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def waits_for(self) -> str: ...


def out_of_range(rank: int, world_size: int) -> str:
    """The sentence refusing ``rank`` in a world of ``world_size``."""
    return (f"rank {rank} is out of range for world size {world_size}: use 0 to "
            f"{world_size - 1}, or -1 to let the coordinator choose")


async def connect(where: Place, token: bytes | None, tls: Tls | None) -> CoordinatorClient:
    """Reach the coordinator ``where`` names, within its timeout.

    A rank out of range for its world size joins all the same, so that the
    coordinator refuses it and fails the rest of its rendezvous at once; it
    tries for :data:`OUT_OF_RANGE_REPORT_S` at most, then fails alone.

    Raises:
        RendezvousError: as CoordinatorClient.connect.
        ConfigurationError: the rank is out of range and no coordinator answered.
    """
    bad = where.rank >= where.world_size
    timeout = min(where.timeout, OUT_OF_RANGE_REPORT_S) if bad else where.timeout
    try:
        return await CoordinatorClient.connect(where.host, where.port, timeout, token,
                                               where.fallbacks, tls, where.waits_for)
    except RendezvousTimeoutError as exc:
        if not bad:
            raise
        raise ConfigurationError(
            f"{out_of_range(where.rank, where.world_size)} (the coordinator at "
            f"{join_host_port(where.host, where.port)} did not answer within {timeout:g} s, "
            "so the other ranks could not be told)") from exc


async def report_while_waiting(client: CoordinatorClient, job: str, timeout: float) -> None:
    """Log who is missing while the rendezvous waits, at growing intervals, with the
    deadline ``timeout`` seconds from now; the coordinator tells one waiting rank per host
    (the others hear an empty line), so a large job logs a line per host, not per rank."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for gap in report_gaps():
        await asyncio.sleep(gap)
        try:
            reply = await client.request(WhoIsMissing(job=job), HANDSHAKE_TIMEOUT_S,
                                         "who is missing")
        except AsyncollError:
            return  # the join request reports the failure
        if isinstance(reply, MissingReply) and reply.line:
            log.warning("%s (coordinator at %s); %s", reply.line, client.address,
                        deadline_text(deadline - loop.time(), timeout))


async def listen(mesh: TcpMesh, plan: ListenPlan) -> int:
    """Bind the data port as ``plan`` says; return the port."""
    ports = plan.ports if plan.ports is not None else (0,)
    try:
        return await mesh.listen(plan.bind, ports)
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            # An advertised address that is not local (NAT, a container's
            # published address): listen everywhere, advertise it all the same.
            log.info("%s is not an address of this host; listening on every interface",
                     plan.bind)
            try:
                return await mesh.listen(wildcard(plan.bind), ports)
            except OSError as retry:
                exc = retry
        where = f"ports {ports.start}-{ports.stop - 1}" if isinstance(ports, range) else "a port"
        raise ConfigurationError(f"cannot listen for peers on {plan.bind} ({plan.source}) at "
                                 f"{where}: {exc}") from exc


def learn_directory(mesh: TcpMesh, client: CoordinatorClient, welcome: Welcome,
                    timeout: float) -> None:
    """Give ``mesh`` the directory ``welcome`` carries; the ports it leaves out are asked
    of the coordinator when first needed, each within ``timeout`` seconds."""
    generation = welcome.generation

    async def resolve(peer: int) -> tuple[str, int]:
        reply = await client.request(Lookup(rank=peer, generation=generation), timeout,
                                     f"the data address of rank {peer}")
        if not isinstance(reply, Address) or reply.rank != peer:
            raise ProtocolError(f"the coordinator answered a lookup of rank {peer} with "
                                f"{reply}")
        return reply.host, reply.port

    mesh.set_directory(welcome.rank, {p.rank: (p.host, p.port, p.hostname)
                                      for p in welcome.peers}, resolve)
