"""What the coordinator tells each member of where the others listen.

A membership's directory is packed once. Up to ``ports_up_to`` ranks it
lists every rank's port; past that, each member's Welcome lists its
:func:`partners`' ports only, and the member asks for any other with a
Lookup, so that no member's Welcome grows with N but by its hosts and log N.
"""

from __future__ import annotations

from asyncoll._rendezvous.records import Job, Member, Reply, error
from asyncoll._wire.compact import pack_directory, pack_ports
from asyncoll._wire.messages import Address, Lookup, Welcome

#: Jobs up to this many ranks get every port in their Welcome (the daemon's
#: --ports-in-welcome-up-to): a Welcome of 1024 ports is 2 KiB.
PORTS_IN_WELCOME_UP_TO = 1024


def partners(rank: int, size: int) -> list[int]:
    """The ranks ``rank`` talks to first in a job of ``size``: rank XOR 2^k (recursive
    doubling) and rank +- 2^k modulo ``size`` (rings, binomial trees)."""
    bits = [1 << k for k in range((size - 1).bit_length())]
    near = {rank ^ b for b in bits}
    near.update([(rank + b) % size for b in bits], [(rank - b) % size for b in bits])
    near.discard(rank)
    return sorted(r for r in near if r < size)


class Directory:
    """One membership's directory, packed once, and each member's Welcome from it.

    Args:
        members: the membership, in rank order.
        generation: its number (see Welcome).
        ports_up_to: the largest membership whose directory lists every port.
    """

    def __init__(self, members: list[Member], generation: int, ports_up_to: int) -> None:
        self._ports = [m.info.port for m in members]
        self._generation = generation
        self._every_port = len(members) <= ports_up_to
        self._blob = pack_directory([(m.info.host, m.info.port, m.info.hostname)
                                     for m in members], self._every_port)

    def welcome(self, rank: int) -> Welcome:
        """Rank ``rank``'s Welcome."""
        size = len(self._ports)
        ports = b"" if self._every_port else pack_ports(
            [(r, self._ports[r]) for r in partners(rank, size)])
        return Welcome(rank=rank, world_size=size, directory=self._blob,
                       generation=self._generation, ports=ports)


def directory_of(job: Job, ports_up_to: int) -> Directory:
    """The directory of ``job``'s membership now, for its Welcomes."""
    return Directory([job.members[r] for r in range(job.world_size)], job.generation,
                     ports_up_to)


def answer_lookup(job: Job, conn: int, request_id: int, lookup: Lookup) -> Reply:
    """The address of the rank that ``lookup`` asks for, or why there is none."""
    member = job.members.get(lookup.rank) if lookup.generation == job.generation else None
    if member is None:
        why = (f"rank {lookup.rank} is not a member of job {job.name!r} "
               f"({job.world_size} members)" if lookup.generation == job.generation else
               f"job {job.name!r} is at generation {job.generation}, not "
               f"{lookup.generation}: its members of then are not listed any more")
        return error(conn, request_id, "protocol" if lookup.generation == job.generation
                     else "group_broken", f"no address for rank {lookup.rank}: {why}")
    return Reply(conn, request_id, Address(rank=lookup.rank, host=member.info.host,
                                           port=member.info.port))
