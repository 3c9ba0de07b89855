"""The directory: where each member of a job listens, as the coordinator tells it.

A Welcome carries the membership's directory, packed once for all of its
members. In a job larger than the coordinator's ``--ports-in-welcome-up-to``
the directory names every rank's host but not its port, which would make
each Welcome O(N) bytes and the rendezvous O(N^2): each member's Welcome
then carries the ports of the ranks it talks to first (``ports``), and the
member asks the coordinator for any other one (Lookup) when it first dials
it. Defined apart from :mod:`asyncoll._wire.messages`, which names them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from asyncoll._wire.compact import pack_directory, unpack_directory, unpack_ports
from asyncoll.errors import ProtocolError


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """One member of a job, as the directory in Welcome lists it (port 0: not listed)."""

    rank: int
    host: str
    port: int
    hostname: str


@dataclass(frozen=True, slots=True)
class Welcome:
    """Coordinator -> peer: the rendezvous (or a reconfigure) is complete.

    ``directory`` is every member's data address, packed once for all of them
    (:func:`asyncoll._wire.compact.pack_directory`), with or without the ports;
    ``ports`` the ports of some ranks besides (:func:`asyncoll._wire.compact.pack_ports`).
    :attr:`peers` unpacks both. ``generation`` counts the job's memberships: 0
    at its rendezvous, one more at each reconfigure.
    """

    TYPE: ClassVar[str] = "welcome"
    rank: int
    world_size: int
    directory: bytes
    generation: int = 0
    ports: bytes = b""

    @classmethod
    def of(cls, rank: int, peers: tuple[PeerInfo, ...], generation: int = 0) -> Welcome:
        """The Welcome of ``rank`` to a membership whose rank ``r`` is ``peers[r]``."""
        return cls(rank=rank, world_size=len(peers), generation=generation,
                   directory=pack_directory([(p.host, p.port, p.hostname) for p in peers]))

    @property
    def peers(self) -> tuple[PeerInfo, ...]:
        """Every member, in rank order (unpacked anew at each read); port 0 where
        neither the directory nor ``ports`` lists it.

        Raises:
            ProtocolError: the directory or the ports are malformed, or the
                directory is not ``world_size`` long.
        """
        peers = unpack_directory(self.directory)
        if len(peers) != self.world_size:
            raise ProtocolError(f"the coordinator's directory lists {len(peers)} members for "
                                f"a world of {self.world_size}")
        ports = unpack_ports(self.ports, self.world_size)
        return tuple(PeerInfo(rank, host, ports.get(rank, port), hostname)
                     for rank, (host, port, hostname) in enumerate(peers))


@dataclass(frozen=True, slots=True)
class Lookup:
    """Peer -> coordinator: where rank ``rank`` of membership ``generation`` listens."""

    TYPE: ClassVar[str] = "lookup"
    rank: int
    generation: int


@dataclass(frozen=True, slots=True)
class Address:
    """Coordinator -> peer: the answer to Lookup."""

    TYPE: ClassVar[str] = "address"
    rank: int
    host: str
    port: int
