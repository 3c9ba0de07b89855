"""Membership: what a group needs of this process's membership in its job.

The group layer sits below the runtime, so it names what it uses here, and
the runtime's Session provides it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from asyncoll._group.faults import GroupFaults
from asyncoll._transport.base import MeshControl


class Membership(Protocol):
    """This process in its job: its rank, its data plane, and its coordinator link."""

    #: Operations started on this rank, in every group (reported in heartbeats).
    ops: int

    @property
    def rank(self) -> int:
        """This process's global rank."""

    @property
    def mesh(self) -> MeshControl:
        """The data plane: the seam the algorithms speak to, and what the group layer adds."""

    @property
    def faults(self) -> GroupFaults:
        """Which groups are broken on this rank, and why."""

    @property
    def forced_algorithms(self) -> Mapping[str, str]:
        """The algorithm forced per collective (ASYNCOLL_ALGORITHM), read at join."""

    def check_open(self, what: str) -> None:
        """Raise ClosedError once this rank has destroyed its process group."""

    async def barrier(self, group_id: int, timeout: float) -> None:
        """Wait, through the coordinator, until every member reached the same barrier."""
