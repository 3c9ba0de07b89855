"""What joining a job needs besides the coordinator's answer: a data port to listen on,
word of who is missing while the rendezvous waits, and the directory the answer gives."""

from __future__ import annotations

import asyncio
import errno
import logging

from asyncoll._defaults import WAITING_REPORT_INTERVAL_S
from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._runtime.addresses import ListenPlan
from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll._wire.endpoint import wildcard
from asyncoll._wire.messages import Address, Lookup, MissingReply, Welcome, WhoIsMissing
from asyncoll.errors import AsyncollError, ConfigurationError, ProtocolError

log = logging.getLogger("asyncoll")


async def report_while_waiting(client: CoordinatorClient, job: str) -> None:
    """Log who is missing every few seconds while the rendezvous waits."""
    while True:
        await asyncio.sleep(WAITING_REPORT_INTERVAL_S)
        try:
            reply = await client.request(WhoIsMissing(job=job), WAITING_REPORT_INTERVAL_S,
                                         "who is missing")
        except AsyncollError:
            return  # the join request reports the failure
        if isinstance(reply, MissingReply) and reply.line:
            log.warning("%s", reply.line)


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
