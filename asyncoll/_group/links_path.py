"""GroupLinks: a group's own TCP connections for collectives in the calling thread, across hosts.

The cross-host counterpart of GroupArena (asyncoll._group.arena_path): a
group whose members are not all on one host gets, the first time one of its
collectives picks the "links" algorithm, its own connections
(asyncoll._transport.links), and its small operations then run the usual
algorithms (recursive doubling, the binomial tree, the ring all-gather)
over them in the calling thread: no hop to the event loop's thread and
back, and no wake-up of it, on the way. A member connects only to the
members its algorithms exchange records with, the first time they do:
O(log N) connections for recursive doubling and the tree, not N - 1.

Setting up runs inside that first operation, on the loop: every member
listens on its advertised address, an all-gather over the transport tells
everyone each member's port and a random cookie, each member dials its
right neighbour (greeting it with its cookie, which only the job's members
learned), and an all-reduce of "connected" flags tells every member
whether all did. If any could not (a firewall that lets only the data ports
through, say), every member knows, and the group keeps the transport's
algorithms: ranks always agree on the path. The other links are opened by
the operations that first need them. A path built on the links (a group's
hierarchy, asyncoll._group.hierarchy) sets itself up inside that same set-up,
as its layer, where every member has one.

While an operation waits, between polls it checks what the loop has learned
(a lost peer, an ABORT: the group's sticky error), whether the member it
waits for left the job, and whether the operation was cancelled; a closed
connection is a lost peer, a record of another operation a desync.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms.doubling import (
    DoublingOnLinks,
    check_on_links,
    recursive_doubling_all_reduce,
)
from asyncoll._algorithms.ring import ring_all_gather
from asyncoll._algorithms.team import Team, run_here
from asyncoll._algorithms import selection
from asyncoll._group.closing import close_under, destroyed
from asyncoll._group.context import Membership
from asyncoll._group.faults import named_by
from asyncoll._group.mismatch import desync, stale as stale_frame
from asyncoll._group.processors import processors
from asyncoll._group.plan import Kernel, Signature, Transport
from asyncoll._group.transports import Scratch
from asyncoll._transport import link_opening
from asyncoll._transport.link_opening import Dialling
from asyncoll._transport.link_errors import LinkAborted, LinkLost, LinkMismatch, LinksExpired
from asyncoll._transport.links import EAGER_POLLS, DirectLinks
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import (
    AsyncollError,
    CollectiveError,
    GroupBrokenError,
    PeerLostError,
    broken_by,
    error_code,
)
from asyncoll.types import ReduceOp

log = logging.getLogger("asyncoll")

#: What a path built on the links sets up inside their set-up, on the group's team.
Layer = Callable[[Team], Awaitable[None]]


@dataclass
class LinksStep:
    """One operation over the links: what its algorithm is given."""

    links: DirectLinks
    #: The operation's number on these links (1, 2, ...), the same on every member.
    operation: int
    fingerprint: Fingerprint
    #: This member's index in the group.
    me: int
    #: Set by another thread to make the waits give up (the operation was cancelled).
    cancelled: bool = False
    #: The operation before this one, so data sent late for it can be told apart.
    previous: Fingerprint | None = None


class GroupLinks:
    """A group's direct links: whether it can have them, opening them, checks while waiting.

    Args:
        session: this process's membership in the job.
        group_id: the group.
        ranks: its members' global ranks, in group-rank order.
        capacity: the largest operation (bytes) to run over them; 0: never.
        scratch: the group's working memory.
    """

    #: The algorithm name selection gives operations on this path.
    algorithm = "links"
    #: The phases (Team.phase) of the set-up's operation it uses: two of its own, and
    #: three of a layer's (the hierarchy's), which every member counts, with a layer or not.
    set_up_phases = 5

    def __init__(self, session: Membership, group_id: int, ranks: tuple[int, ...],
                 capacity: int, scratch: Scratch) -> None:
        self._session = session
        self._tls = session.policy.tls
        self._group_id = group_id
        self._ranks = ranks
        self._scratch = scratch
        member = session.rank in ranks
        self._me = ranks.index(session.rank) if member else -1
        # The team of operations run over the links, made once (they run one at a time).
        self._team: Team | None = None
        #: The largest operation to run over the links (0: this group has none).
        self.capacity = capacity if member else 0
        self.links: DirectLinks | None = None
        self._step: LinksStep | None = None
        #: Held by the thread running an operation over the links, for its length.
        self.lock = threading.Lock()
        #: Set once the group is closed here: operations give up, and the links are
        #: closed as soon as none runs (asyncoll._group.closing).
        self.closing = False

    @property
    def up_to(self) -> Mapping[str, int]:
        """The largest operation each collective chooses the links for."""
        return selection.UP_TO_BYTES[selection.LINKS]

    @property
    def ready(self) -> bool:
        """Whether the links are open, so operations may run in the calling thread."""
        return self.links is not None

    @property
    def deadline(self) -> float:
        """The deadline of the latest operation over the links (time.monotonic; 0.0: none)."""
        links = self.links
        return links.deadline if links is not None and self._step is not None else 0.0

    @property
    def undecided(self) -> bool:
        """Whether the next operation on this path must open the links first."""
        return self.capacity > 0 and self.links is None

    async def set_up(self, team: Team, layer: Layer | None = None) -> None:
        """Learn every member's address and open the links to the ring neighbours (inside
        the first operation on this path).

        Afterwards either :attr:`ready`, or :attr:`capacity` is 0 on every member.

        Args:
            team: the set-up's operation's team.
            layer: the set-up of a path built on the links, run with ``team.phase(2)``
                once they are connected, where every member has one; a member with none
                says so, and then no member runs its own.
        """
        me, n = team.me, team.size
        cookie = secrets.randbits(62)
        server = None
        address = self._session.mesh.peer_address(self._ranks[me])
        try:
            if address is not None:
                server = link_opening.listen(address[0])
        except OSError as exc:
            log.info("group %d: no direct links (cannot listen on %s: %s)", self._group_id,
                     address[0] if address else "?", exc)
        # Each member's port, cookie, and whether it has a layer to set up.
        directory = [np.zeros(3, dtype=np.int64) for _ in range(n)]
        directory[me][:] = (server.getsockname()[1] if server is not None else 0, cookie,
                            layer is not None)
        sockets: dict[int, object] = {}
        try:
            await ring_all_gather(team.phase(0), directory, 1 << 20)
            ok = server is not None and all(int(entry[0]) for entry in directory)
            if ok:
                try:
                    sockets = await asyncio.wait_for(
                        self._connect(me, n, server, cookie, directory), timeout=10)
                except (OSError, asyncio.TimeoutError) as exc:
                    log.info("group %d: no direct links (%s)", self._group_id, exc)
                    ok = False
            flag = np.array([ok], dtype=np.uint8)
            await recursive_doubling_all_reduce(team.phase(1), flag, ReduceOp.MIN,
                                                np.empty(1, dtype=np.uint8))
            # Every member decides alike, as each saw the same directory and flag.
            if layer is not None and flag[0] and all(int(entry[2]) for entry in directory):
                await layer(team.phase(2))
        except BaseException:
            _let_go(sockets, server)
            raise
        if flag[0]:
            assert server is not None
            self._open(me, server, cookie, sockets, directory)
        else:
            _let_go(sockets, server)
            self.capacity = 0

    def _open(self, me: int, server: object, cookie: int, sockets: dict[int, object],
              directory: Sequence[NDArray[Any]]) -> None:
        """Make the links of the set-up's ``sockets``, dialling others as they are needed."""
        mesh = self._session.mesh
        here = mesh.hostname(self._session.rank)
        local = sum(1 for rank in self._ranks if mesh.hostname(rank) == here)
        hosts = [mesh.peer_address(rank) for rank in self._ranks]
        dialling = Dialling(server, me, cookie, [  # type: ignore[arg-type]
            (host[0] if host else "", int(entry[0]), int(entry[1]))
            for host, entry in zip(hosts, directory)], self._tls)
        self.links = DirectLinks(sockets,  # type: ignore[arg-type]
                                 EAGER_POLLS if local <= processors() else 0, dialling)
        if self.closing:  # closed during the set-up: nothing may be left open
            self.let_go()

    async def _connect(self, me: int, n: int, server: object, cookie: int,
                       directory: Sequence[NDArray[Any]]) -> dict[int, object]:
        """Dial the right neighbour, accept the left one (the lower member dials).

        The ring's and every neighbour check's links; they also show that
        the members can reach each other at all.
        """
        sockets: dict[int, object] = {}
        accepting = link_opening.accept(server, cookie,  # type: ignore[arg-type]
                                        {me - 1}, self._tls) if me > 0 else None
        if me + 1 < n:
            address = self._session.mesh.peer_address(self._ranks[me + 1])
            assert address is not None
            sockets[me + 1] = await link_opening.dial(
                address[0], int(directory[me + 1][0]), int(directory[me + 1][1]), me, self._tls)
        if accepting is not None:
            sockets.update(await accepting)
        return sockets

    def kernel(self, signature: Signature, algorithm: str, transport: Transport) -> Kernel:
        """What runs calls of ``signature`` over the links: (step, arrays) -> None.

        The transport's ``algorithm`` itself, run in this thread over a
        Team over a LinksMesh (asyncoll._transport.link_mesh); recursive doubling in
        plain calls instead, made ready once, where a coroutine's layers cost
        more than the exchange (small all-reduces and the barrier).
        """
        size = len(self._ranks)
        if signature.collective == "barrier":
            # A barrier moves no data: the kernel all-reduces a zero byte of its own.
            doubling = DoublingOnLinks(self._me, size, np.dtype(np.uint8), 1, ReduceOp.MAX,
                                       self._scratch)
            return functools.partial(_barrier, doubling, np.zeros(1, dtype=np.uint8))
        if signature.collective == "all_reduce" and algorithm == "recursive_doubling" \
                and signature.compression is None:
            dtype, op = signature.dtype, signature.op
            assert dtype is not None and op is not None
            return DoublingOnLinks(self._me, size, dtype, signature.elements, op,
                                   self._scratch).run
        return functools.partial(self._over_links, transport)

    def _over_links(self, transport: Transport, step: LinksStep, arrays: object) -> None:
        """Run the transport's algorithm to its end over the links, in this thread."""
        team = self._team
        if team is None or team.mesh is not step.links.mesh:
            team = self._team = Team(step.links.mesh, range(len(self._ranks)), 0, 0,
                                     me=step.me)
        run_here(transport(team.again(), arrays))
        check_on_links(step.links, *team.unchecked())

    def step(self, fingerprint: Fingerprint, limit: float, started: int = 0) -> LinksStep:
        """The next operation over the links, with its deadline ``limit`` seconds from now
        (``started`` is 0: the compiled entry runs on arenas only)."""
        step = self._step
        if step is None:
            if self.links is None:
                raise destroyed(self._group_id, 0)
            me = self._ranks.index(self._session.rank)
            step = self._step = LinksStep(self.links, 0, fingerprint, me)
        step.previous = step.fingerprint if step.operation else None
        step.operation += 1
        step.fingerprint = fingerprint
        step.cancelled = False
        step.links.stamp(step.operation, fingerprint, time.monotonic() + limit, self.check)
        return step

    def check(self, waiting_for: list[int]) -> None:
        """Raise what stops the operation from waiting for members ``waiting_for`` any longer."""
        step = self._step
        assert step is not None
        if self.closing:
            raise destroyed(self._group_id, step.operation)
        if step.cancelled:
            raise CollectiveError(f"operation #{step.operation} over group "
                                  f"{self._group_id}'s direct links was cancelled")
        self._session.check_open(f"an operation of group {self._group_id}")
        for index in waiting_for:
            rank = self._ranks[index]
            self._session.mesh.awaiting(rank)  # the keepalive probes it
            left = self._session.faults.left(rank)
            if left is not None:
                raise copy.copy(left)
        first = self._session.faults.stopping(self._group_id)
        if first is not None:
            raise first

    def expired(self, exc: BaseException) -> list[int] | None:
        """The member indices a deadline's expiry (``exc``) waited for; None for other errors."""
        return exc.waiting_for if isinstance(exc, LinksExpired) else None

    def failure(self, exc: BaseException) -> AsyncollError | None:
        """The asyncoll error a link's ``exc`` stands for, or None if it is not a link's."""
        if isinstance(exc, LinkLost):
            rank = self._ranks[exc.index]
            left = self._session.faults.left(rank)
            if left is not None:
                return copy.copy(left)
            host = self._session.mesh.hostname(rank)
            return PeerLostError(f"rank {rank} on host {host} was lost: {exc}", rank=rank,
                                 host=host)
        if isinstance(exc, LinkAborted):
            error = self._session.faults.gave_up(
                self._group_id, exc.operation, self._ranks[exc.index],
                exc.code, exc.rank, exc.message, " (over its direct links)")
            step = self._step
            if step is not None and exc.operation < step.operation:
                # The group failed in an operation this rank had completed already:
                # this one meets the group broken, as it would meet it on the loop.
                broken = broken_by(f"group {self._group_id} (ranks {list(self._ranks)})",
                                   error)
                broken.__cause__ = error
                return broken
            return error
        if isinstance(exc, LinkMismatch):
            step = self._step
            assert step is not None
            rank, me = self._ranks[exc.index], self._session.rank
            theirs = Fingerprint(*exc.theirs)
            if exc.operation < step.operation:
                # Sent for an operation this rank completed without it: the ranks
                # were out of step then, and the group has been broken since.
                mine = step.previous if exc.operation == step.operation - 1 else None
                stale = stale_frame(me, rank, (self._group_id, exc.operation, 0), mine, theirs)
                broken = broken_by(f"group {self._group_id} (ranks {list(self._ranks)})",
                                   stale)
                broken.__cause__ = stale
                return broken
            return desync(me, rank, (self._group_id, step.operation, 0), step.fingerprint,
                          theirs, f"a record of {exc.nbytes} bytes")
        return None

    def abandon(self, step: LinksStep, error: BaseException) -> None:
        """Tell the other members, over the links, that this member gave up on ``step``."""
        operation, cause = step.operation, error.__cause__
        if isinstance(error, GroupBrokenError) and isinstance(cause, AsyncollError) and \
                operation > 1:
            # The group broke in an operation before this one: say so, and why, so
            # that the others meet it broken by the same kind of error as here.
            operation, error = operation - 1, cause
        code = error_code(type(error) if isinstance(error, AsyncollError) else CollectiveError)
        step.links.abort(operation, code, named_by(error)[0], str(error))

    def close(self) -> None:
        """Close the links (its group is destroyed, or the session closes), once no
        operation runs over them (asyncoll._group.closing)."""
        self.closing = True
        self.capacity = 0
        if self.links is not None:
            close_under(self.lock, self.let_go, f"group {self._group_id}'s direct links")

    def let_go(self) -> None:
        """Close the links now (the caller holds :attr:`lock`, or no operation can run)."""
        links, self.links = self.links, None
        self._step = None
        self._team = None
        if links is not None:
            links.close()


def _let_go(sockets: dict[int, object], server: object | None) -> None:
    """Close a set-up's sockets and its listening server (the links were not made)."""
    for sock in sockets.values():
        sock.close()  # type: ignore[attr-defined]
    if server is not None:
        server.close()  # type: ignore[attr-defined]


def _barrier(doubling: DoublingOnLinks, token: NDArray[Any], step: LinksStep,
             nothing: None) -> None:
    doubling.run(step, token)
