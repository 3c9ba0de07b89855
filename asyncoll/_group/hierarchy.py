"""HostHierarchy: a multi-host group's fast path, through each host's arena and direct links.

A group whose members span hosts, several on some, runs all_reduce (every
size), broadcast and reduce (up to selection.HIERARCHY_UP_TO_BYTES) and
barrier in three steps, in the calling thread:

1. within each host, through an arena of that host's members
   (asyncoll._group.arena_path.GroupArena);
2. between one member per host (its leader: its first member, or the
   root), over the group's direct links (asyncoll._transport.links), which
   then connect only those members;
3. within each host again, through its arena.

So a 4-byte all_reduce of H hosts x P ranks crosses the network
log2(H) times, not log2(H x P); a large one sends 2(H - 1)/H of the array
from each host's leader (the ring among leaders), not from each rank; and
the members of one host meet in shared memory. Every member ends with the
leader's bits (step 3 copies them), so results are the same on every rank;
desyncs are found by the arenas (within a host) and the links (between
hosts), and a member giving up tells both.

It is the fast path (asyncoll._group.fast_path) of such a group: its
direct links (asyncoll._group.links_path.GroupLinks) and its host's arena
(asyncoll._group.arena_path.GroupArena). Operations run over the links,
under their lock and with their steps; the collectives and sizes above
run in three steps, the others (and all, where the group ends up with no
hierarchy) over the links among all members, as in a group without one.

The hierarchy is set up inside the links' set-up, as their layer
(GroupLinks.set_up): each host's members map an arena, and an all-reduce
over the group agrees on the smallest room of any host's arena (any size,
in pieces); a host that could map none makes it 0, and then no member uses
the hierarchy. A member that wants none (ASYNCOLL_HIERARCHY=0) has plain
links, which tell every member so, and then no member sets one up.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms import arena as in_arena
from asyncoll._algorithms import selection
from asyncoll._algorithms.compressed_ring import compressed_ring_all_reduce
from asyncoll._algorithms.compression import codec
from asyncoll._algorithms.doubling import (
    DoublingOnLinks,
    check_on_links,
    recursive_doubling_all_reduce,
)
from asyncoll._algorithms.ops import finish
from asyncoll._algorithms.ring import all_reduce_scratch_elements, ring_all_reduce
from asyncoll._algorithms.team import Team, run_here
from asyncoll._algorithms.tree import tree_broadcast, tree_reduce
from asyncoll._group.arena_path import ArenaStep, GroupArena
from asyncoll._group.closing import close_under
from asyncoll._group.context import Membership
from asyncoll._group.links_path import GroupLinks, LinksStep
from asyncoll._group.plan import Kernel, Signature, Transport
from asyncoll._group.transports import Scratch
from asyncoll._transport.links import DirectLinks
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import AsyncollError
from asyncoll.types import ReduceOp

#: The collectives the hierarchy runs (others take the flat links).
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "barrier")
#: A host with one member of the group has no arena, and bounds nothing.
_UNBOUNDED = (1 << 62)


class HostHierarchy:
    """A member's fast path in a group spanning hosts, several members on some.

    Its view of the group's hosts, the arena of its own host, and the
    group's direct links (see the module).

    Args:
        session: this process's membership in the job; a member of the group.
        group_id: the group.
        ranks: its members' global ranks, in group-rank order.
        links: the group's direct links, not yet set up.
        scratch: the group's working memory.
    """

    #: The algorithm name selection gives operations on this path: the links'.
    algorithm = GroupLinks.algorithm
    #: The phases (Team.phase) of the set-up's operation it uses: the links' (theirs
    #: count the hierarchy's).
    set_up_phases = GroupLinks.set_up_phases

    def __init__(self, session: Membership, group_id: int, ranks: tuple[int, ...],
                 links: GroupLinks, scratch: Scratch) -> None:
        mesh = session.mesh
        by_host: dict[str, list[int]] = {}
        for index, rank in enumerate(ranks):
            by_host.setdefault(mesh.hostname(rank), []).append(index)
        #: Each host's members (group indices), hosts in order of their first member.
        self.hosts = [tuple(members) for members in by_host.values()]
        #: The host of each member.
        self.host_of = [0] * len(ranks)
        for host, members in enumerate(self.hosts):
            for index in members:
                self.host_of[index] = host
        self.me = ranks.index(session.rank)
        self.host = self.host_of[self.me]
        self.local = self.hosts[self.host]
        self._ranks = ranks
        self._group_id = group_id
        local_ranks = tuple(ranks[index] for index in self.local)
        self.arena = GroupArena(session, group_id, local_ranks) if len(self.local) > 1 \
            else None
        #: The largest operation (bytes) the hierarchy takes; 0 until set up, or none.
        self.room = 0
        self._last: ArenaStep | None = None
        self._teams: dict[tuple[int, ...], Team] = {}
        self._links = links
        self._scratch = scratch
        #: Held by the thread running an operation on the path (the links'), for its length.
        self.lock = links.lock
        #: The next operation over the links: what the kernels are given (GroupLinks.step).
        self.step: Callable[[Fingerprint, float, int], LinksStep] = links.step
        # Chosen before the set-up decides whether the group has its hierarchy, so
        # that every member chooses alike whenever it calls.
        flat = links.up_to
        self._up_to = {
            collective: max(flat[collective], selection.HIERARCHY_UP_TO_BYTES.get(collective, 0))
            for collective in flat}

    @property
    def capacity(self) -> int:
        """The largest operation (bytes) operations choose the path for: the links'."""
        return self._links.capacity

    @property
    def up_to(self) -> Mapping[str, int]:
        """The largest operation each collective chooses the path for: larger than the
        links' for the collectives the hierarchy takes (if the group then has none, the
        flat links run them)."""
        return self._up_to

    @property
    def ready(self) -> bool:
        """Whether the links are open, so operations may run in the calling thread."""
        return self._links.links is not None

    @property
    def links(self) -> DirectLinks | None:
        """The group's direct links, once open (None: not yet, or closed)."""
        return self._links.links

    @property
    def deadline(self) -> float:
        """The deadline of the latest operation on the path (time.monotonic; 0.0: none)."""
        return self._links.deadline

    @property
    def undecided(self) -> bool:
        """Whether the next operation on the path must set it up first."""
        return self._links.undecided

    async def set_up(self, team: Team) -> None:
        """Open the links with every member, and set the hierarchy up as their layer
        (GroupLinks.set_up)."""
        await self._links.set_up(team, self._set_up_arenas)

    async def _set_up_arenas(self, team: Team) -> None:
        """Map this host's arena, and agree on the room with every member (three phases
        of ``team``, the group's)."""
        room = _UNBOUNDED
        if self.arena is not None:
            local = Team(team.mesh, [self._ranks[i] for i in self.local], team.group_id,
                         team.seq, team.first_step, team.fingerprint)
            await self.arena.set_up(local)
            room = self.arena.capacity if self.arena.ready else 0
        agreed = np.array([room], dtype=np.int64)
        await recursive_doubling_all_reduce(team.phase(2), agreed, ReduceOp.MIN,
                                            np.empty(1, dtype=np.int64))
        self.room = int(agreed[0])
        if not self.room and self.arena is not None:
            self.arena.close()

    @property
    def closing(self) -> bool:
        """Whether the group is closed here (its links and arena go once no operation runs)."""
        return self._links.closing

    def close(self) -> None:
        """Close the links and unmap this host's arena (its group is destroyed, or the
        session closes), once no operation runs on the path: the links' lock covers
        both (asyncoll._group.closing)."""
        self._links.closing = True
        if self.arena is not None:
            # Its waits give up at their next check, as the links' do.
            self.arena.closing = True
        close_under(self.lock, self.let_go, f"group {self._group_id}'s hierarchy")

    def let_go(self) -> None:
        """Close the links and the arena now (the caller holds :attr:`lock`)."""
        self._last = None
        self._links.let_go()
        self._links.close()  # the flags; nothing is left to wait for
        if self.arena is not None:
            self.arena.close()

    def leaders(self, root: int = -1) -> tuple[int, ...]:
        """Each host's leader (group index): its first member, or ``root`` on root's host."""
        leaders = [members[0] for members in self.hosts]
        if root >= 0:
            leaders[self.host_of[root]] = root
        return tuple(leaders)

    def arena_step(self, fingerprint: Any, deadline: float) -> ArenaStep:
        """The next operation on this host's arena, ending at ``deadline``."""
        assert self.arena is not None
        self._last = self.arena.step(fingerprint, max(deadline - time.monotonic(), 0.0))
        return self._last

    def kernel(self, signature: Signature, algorithm: str, transport: Transport) -> Kernel:
        """What runs calls of ``signature``: (links step, arrays) -> None.

        The hierarchy's three steps for the collectives and sizes it takes,
        where the group has it (or may: it is set up inside the first
        operation, whose kernel is made before); else the links' kernel
        (GroupLinks.kernel), which stands in for the transport's
        ``algorithm`` (``transport``) among all members.
        """
        flat = self._links.kernel(signature, algorithm, transport)
        collective = signature.collective
        if collective not in COLLECTIVES or not (self.room or self._links.undecided):
            return flat
        nbytes = signature.elements * signature.dtype.itemsize \
            if signature.dtype is not None else 0
        if nbytes > selection.HIERARCHY_UP_TO_BYTES[collective]:
            return flat
        # Which of the two runs is known once the links are set up (the first
        # operation's kernel is made before): the same on every member.
        return functools.partial(_either, self, nbytes, self._three_steps(signature), flat)

    def expired(self, exc: BaseException) -> list[int] | None:
        """The member indices a deadline's expiry (``exc``) waited for, in this host's arena
        or over the links; None for other errors."""
        behind = self.arena.expired(exc) if self.arena is not None else None
        if behind is not None:
            return [self.local[index] for index in behind]
        return self._links.expired(exc)

    def failure(self, exc: BaseException) -> AsyncollError | None:
        """The asyncoll error a link's ``exc`` stands for (the arena's waits raise asyncoll
        errors themselves), else None."""
        return self._links.failure(exc)

    def abandon(self, step: LinksStep, error: BaseException) -> None:
        """Tell the other members, over the links and through this host's arena, that this
        member gave up on ``step``."""
        self._links.abandon(step, error)
        if self.arena is not None and self._last is not None:
            self.arena.abandon(self._last, error)

    def _three_steps(self, signature: Signature) -> Kernel:
        """What runs calls of ``signature`` in three steps: (links step, arrays) -> None."""
        scratch = self._scratch
        collective = signature.collective
        if collective == "barrier":
            return functools.partial(_barrier, self, DoublingOnLinks(
                self.host, len(self.hosts), np.dtype(np.uint8), 1, ReduceOp.MAX, scratch,
                self.leaders()), np.zeros(1, dtype=np.uint8))
        if collective == "all_reduce":
            assert signature.dtype is not None and signature.op is not None
            run = _compressed_all_reduce if signature.compression is not None else _all_reduce
            return functools.partial(run, self, signature.op,
                                     self._between_leaders(signature, scratch))
        if collective == "broadcast":
            return functools.partial(_broadcast, self, signature.root)
        assert collective == "reduce" and signature.op is not None
        return functools.partial(_reduce, self, signature.op, signature.root, scratch)

    def _between_leaders(self, signature: Signature,
                         scratch: Scratch) -> Callable[[Any, NDArray[Any]], None] | None:
        """The all_reduce step among the hosts' leaders, run by a leader (step, data) ->
        None, as the flat links choose it for as many members: recursive doubling for
        small arrays, the ring for large ones; None for a member that is no leader."""
        leaders = self.leaders()
        if self.me not in leaders:
            return None
        assert signature.dtype is not None and signature.op is not None
        dtype, count, hosts = signature.dtype, signature.elements, len(self.hosts)
        op = _combining(signature.op)
        if signature.compression is not None:  # between hosts only: their sums exact
            coder = codec(signature.compression[0], dtype, signature.compression[1])

            def compressed(step: Any, data: NDArray[Any],
                           residual: NDArray[Any] | None = None) -> None:
                self.over_leaders(step, leaders, lambda team: compressed_ring_all_reduce(
                    team, data, op, coder, selection.SEGMENT_BYTES, residual))

            return compressed
        if selection.socket_choice("all_reduce", count * dtype.itemsize, hosts) != "ring":
            return DoublingOnLinks(self.host, hosts, dtype, count, op, scratch, leaders).run

        def ring(step: Any, data: NDArray[Any]) -> None:
            room = scratch(dtype, all_reduce_scratch_elements(count, hosts))
            self.over_leaders(step, leaders, lambda team: ring_all_reduce(
                team, data, op, room, selection.SEGMENT_BYTES))

        return ring

    def over_leaders(self, step: Any, leaders: tuple[int, ...],
                     algorithm: Callable[[Team], Any]) -> None:
        """Run ``algorithm``'s coroutine among the hosts' ``leaders`` (this member is one)."""
        team = self._teams.get(leaders)
        if team is None or team.mesh is not step.links.mesh:
            # One per set of leaders (a root's host has its own), made once.
            team = self._teams[leaders] = Team(step.links.mesh, leaders, 0, 0, me=self.host)
        run_here(algorithm(team.again()))
        check_on_links(step.links, *team.unchecked())


def _either(h: HostHierarchy, nbytes: int, hierarchical: Kernel, flat: Kernel,
            step: LinksStep, arrays: object) -> None:
    """Run ``hierarchical`` where the group's hierarchy has room for it, else ``flat``."""
    (hierarchical if h.room >= nbytes else flat)(step, arrays)


def _combining(op: ReduceOp) -> ReduceOp:
    """What the steps combine with: AVG sums, and divides once, at the end."""
    return ReduceOp.SUM if op is ReduceOp.AVG else op


def _all_reduce(h: HostHierarchy, op: ReduceOp,
                between: Callable[[Any, NDArray[Any]], None] | None, step: Any,
                data: NDArray[Any]) -> None:
    combining, deadline = _combining(op), step.links.deadline
    if h.arena is not None:
        local = h.arena_step(step.fingerprint, deadline)
        local.operation = in_arena.reduce(local.arena, local.operation, data, combining, 0,
                                          local.fingerprint, local.waiter)
    if between is not None:
        between(step, data)
        if op is not combining:
            finish(op, data, len(h.host_of))
    if h.arena is not None:
        local = h.arena_step(step.fingerprint, deadline)
        local.operation = in_arena.broadcast(local.arena, local.operation, data, 0,
                                             local.fingerprint, local.waiter)


def _compressed_all_reduce(h: HostHierarchy, op: ReduceOp, between: Callable[..., None] | None,
                           step: Any, arrays: tuple[NDArray[Any], NDArray[Any] | None]) -> None:
    """_all_reduce of a compressed call's (data, residual or None): the leaders' ring
    feeds the residual back; a member that is no leader encodes nothing, drops nothing."""
    data, residual = arrays
    if between is None:
        if residual is not None:
            residual[:] = 0
        _all_reduce(h, op, None, step, data)
    else:
        _all_reduce(h, op, lambda at, values: between(at, values, residual), step, data)


def _broadcast(h: HostHierarchy, root: int, step: Any, data: NDArray[Any]) -> None:
    leaders = h.leaders(root)
    leader = leaders[h.host]
    on_root_host = h.host == h.host_of[root]
    if on_root_host and h.arena is not None:
        # The root's host first: its leader is the root itself.
        local = h.arena_step(step.fingerprint, step.links.deadline)
        local.operation = in_arena.broadcast(local.arena, local.operation, data,
                                             h.local.index(root), local.fingerprint,
                                             local.waiter)
    if h.me == leader:
        h.over_leaders(step, leaders, lambda team: tree_broadcast(
            team, data, h.host_of[root]))
    if not on_root_host and h.arena is not None:
        local = h.arena_step(step.fingerprint, step.links.deadline)
        local.operation = in_arena.broadcast(local.arena, local.operation, data,
                                             h.local.index(leader), local.fingerprint,
                                             local.waiter)


def _reduce(h: HostHierarchy, op: ReduceOp, root: int, scratch: Scratch, step: Any,
            data: NDArray[Any]) -> None:
    leaders = h.leaders(root)
    leader = leaders[h.host]
    combining = _combining(op)
    # Only the root's array may change: another leader reduces into a copy, in the
    # group's scratch after the tree's own room.
    room = scratch(data.dtype, 3 * data.size) if h.me == leader else data
    partial = data
    if h.me == leader and h.me != root:
        partial = room[2 * data.size:]
        partial[...] = data
    if h.arena is not None:
        local = h.arena_step(step.fingerprint, step.links.deadline)
        local.operation = in_arena.reduce(local.arena, local.operation, partial, combining,
                                          h.local.index(leader), local.fingerprint,
                                          local.waiter)
    if h.me == leader:
        h.over_leaders(step, leaders, lambda team: tree_reduce(
            team, partial, combining, h.host_of[root],
            room[:2 * data.size]))
        if h.me == root and op is not combining:
            finish(op, data, len(h.host_of))


def _barrier(h: HostHierarchy, doubling: DoublingOnLinks, token: NDArray[Any], step: Any,
             nothing: object) -> None:
    if h.arena is not None:
        local = h.arena_step(step.fingerprint, step.links.deadline)
        in_arena.barrier(local.arena, local.operation, local.fingerprint, local.waiter)
    if h.me == h.leaders()[h.host]:
        doubling.run(step, token)
    if h.arena is not None:
        local = h.arena_step(step.fingerprint, step.links.deadline)
        in_arena.barrier(local.arena, local.operation, local.fingerprint, local.waiter)
