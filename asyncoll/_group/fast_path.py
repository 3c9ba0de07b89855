"""FastPath: what a group's operations in the calling thread need, on one host or across hosts.

A group gets one of three, chosen once, by :func:`fast_path_of`: members
all on one host share a memory arena (asyncoll._group.arena_path.GroupArena)
where arenas are on; members on several hosts, several on some, have their
hosts' arenas and direct links between the hosts
(asyncoll._group.hierarchy.HostHierarchy) where arenas are on and
ASYNCOLL_HIERARCHY is not 0; other groups get direct TCP links
(asyncoll._group.links_path.GroupLinks), over loopback between same-host
members (with ASYNCOLL_SHM=0, say). GroupCore uses each the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from asyncoll._algorithms.team import Team
from asyncoll._group.arena_path import GroupArena
from asyncoll._group.closing import PathLock
from asyncoll._group.context import Membership
from asyncoll._group.hierarchy import HostHierarchy
from asyncoll._group.links_path import GroupLinks
from asyncoll._group.plan import Kernel, Signature, Transport
from asyncoll._group.transports import Scratch
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import AsyncollError


class FastPath(Protocol):
    """A group's way of running operations in the calling thread."""

    #: The algorithm name selection gives operations on this path ("arena", "links"; the
    #: hierarchy's are the links').
    algorithm: str
    #: The phases (Team.phase) of the set-up's operation it uses.
    set_up_phases: int

    @property
    def lock(self) -> PathLock:
        """Held by the thread running an operation on the path, for its length."""

    @property
    def closing(self) -> bool:
        """Whether the group was closed here: operations give up, and the path's memory
        and sockets go once none runs."""

    @property
    def capacity(self) -> int:
        """The largest operation (bytes) operations choose the path for; 0: the group has
        none. It does not change once set up (members must choose alike)."""

    @property
    def up_to(self) -> Mapping[str, int]:
        """The largest operation (bytes) each collective chooses the path for, at most
        :attr:`capacity`; the same on every member, for the group's life."""

    @property
    def ready(self) -> bool:
        """Whether the path is set up, so operations may run in the calling thread."""

    @property
    def deadline(self) -> float:
        """The deadline (time.monotonic's clock) of the latest operation on the path; 0.0
        before the first."""

    @property
    def undecided(self) -> bool:
        """Whether the next operation on the path must set it up first."""

    async def set_up(self, team: Team) -> None:
        """Set the path up with every member, on the loop, inside the first operation."""

    def kernel(self, signature: Signature, algorithm: str, transport: Transport) -> Kernel:
        """The path's algorithm for calls of ``signature``, standing in for the
        transport's ``algorithm`` (``transport``): (step, arrays) -> None."""

    def step(self, fingerprint: Fingerprint, limit: float, started: int) -> Any:
        """The next operation on the path: what its algorithm is given; or, where
        ``started`` is not 0, operation ``started``, which the compiled entry
        (asyncoll._group.express) started on the path and hands over."""

    def expired(self, exc: BaseException) -> list[int] | None:
        """The member indices a deadline's expiry waited for; None for other errors."""

    def failure(self, exc: BaseException) -> AsyncollError | None:
        """The asyncoll error one of the path's own exceptions stands for, else None."""

    def abandon(self, step: Any, error: BaseException) -> None:
        """Tell the other members this one gave up on ``step``."""

    def close(self) -> None:
        """Unmap and close what the path holds, once no operation runs on it (waiting
        for one a while: asyncoll._group.closing). Idempotent."""

    def let_go(self) -> None:
        """Unmap and close what the path holds now; the caller holds :attr:`lock`."""


def fast_path_of(session: Membership, group_id: int, ranks: tuple[int, ...],
                 scratch: Scratch) -> FastPath:
    """The arena for a group whose members share a host (arenas on), the hierarchy for a
    member of one spanning hosts with several members on some (arenas and the hierarchy
    on), direct links otherwise.

    ``scratch`` is the group's working memory, which direct links' algorithms share.
    """
    policy = session.policy
    hosts = [session.mesh.hostname(rank) for rank in ranks]
    distinct = set(hosts)
    if len(distinct) == 1 and "" not in distinct and policy.arena_slot_bytes:
        return GroupArena(session, group_id, ranks)
    links = GroupLinks(session, group_id, ranks, policy.links_bytes, scratch)
    if session.rank in ranks and policy.hierarchy and policy.arena_slot_bytes and \
            "" not in distinct and 1 < len(distinct) < len(hosts):
        return HostHierarchy(session, group_id, ranks, links, scratch)
    return links
