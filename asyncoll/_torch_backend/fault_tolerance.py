"""torch's fault-tolerance API on asyncoll: abort, shutdown, get_error, shrink and reconfigure.

torch 2.14 lets a program survive a lost rank without a restart:
``dist._reconfigure(uuid, handles, timeout)`` re-forms the default group from
handles its processes exchanged out of band, ``dist.shrink_group(ranks)``
gives a group of the others, and ``ProcessGroup.abort()`` fails what is in
flight. All of it is built on asyncoll's elastic generations (a torch job
is an elastic asyncoll job): a reconfigure of the default group, and a
shrink of it, is the coordinator's reconfigure to the membership asked for
(asyncoll._rendezvous.elastic.Terms), which renumbers the survivors in their
order, as torch does; a shrink of any other group is a group of the
survivors over the same connections.

``Recovery`` is the part both shapes of an asyncoll torch group hold (its
own ProcessGroup, and the ``ShrunkBackend`` a shrink gives, which torch runs
under a plain ProcessGroup); the reconfigure is the ProcessGroup's alone
(asyncoll._torch_backend.reconfigure).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterable
from typing import Any, Protocol

import torch

from asyncoll import aio
from asyncoll._group.core import DONE
from asyncoll._group.delegate import Delegate, bind
from asyncoll._torch_backend.collectives import TorchCollectives
from asyncoll._torch_backend.device_backend import BackendCapabilities
from asyncoll._torch_backend.errors import through_torch
from asyncoll._torch_backend.group_ids import members_only_id
from asyncoll._torch_backend.world import TorchWorld
from asyncoll.errors import (
    AbortedError,
    AsyncollError,
    CollectiveTimeoutError,
    ConfigurationError,
    ExcludedError,
    PeerLostError,
)
from asyncoll.group import AsyncProcessGroup

log = logging.getLogger("asyncoll")

_BackendBase: Any = torch._C._distributed_c10d.Backend
#: torch's shrink flags (distributed_c10d.SHRINK_ABORT, where this torch has it).
SHRINK_ABORT = 1


class TorchGroup(Protocol):
    """What Recovery reads and changes of the torch group it is part of."""

    _world: TorchWorld
    _group: AsyncProcessGroup
    #: How every Work names the group.
    _named: str
    #: The future of the operation started last.
    _latest: concurrent.futures.Future[Any]
    #: Whether this group is the job's default group (it leaves the job at its end).
    _owns_world: bool
    #: Its abort, shutdown, get_error and shrink.
    _recovery: Recovery
    #: set_timeout's deadline of its operations, in seconds, or None.
    _default_limit: float | None
    #: The asyncoll group and error of its last operation that failed in the caller's thread.
    _failed_here: tuple[AsyncProcessGroup, AsyncollError] | None


class Recovery:
    """abort, shutdown, get_error and shrink of one asyncoll torch group, a part of it.

    Args:
        owner: the group (an AsyncollProcessGroup or a ShrunkBackend).
    """

    def __init__(self, owner: TorchGroup) -> None:
        self._owner = owner
        #: Set once abort() was called on this rank.
        self._aborted = False
        #: Made with enable_reconfigure: an abort here is torch's revoke, which the next
        #: reconfigure recovers from, and get_error() says SUCCESS after it, as gloo's.
        self.revocable = False

    def shutdown(self, abandon: bool = False) -> None:
        """Leave the asyncoll job when this group owns it; join its threads. A sub-group
        (not the world's group 0) is closed here: its arena, links and thread go now.

        Args:
            abandon: after an abort: wait for no coordinator being reached again.
        """
        owner = self._owner
        if owner._owns_world:
            owner._world.shutdown(abandon)
        elif owner._group.group_id != 0 and not owner._world.closed:
            owner._world.runtime.run(owner._group.destroy())

    def abort(self) -> None:
        """Fail this group's operations, running and to come, with AbortedError at once, here
        and on the other members (told by this rank); the default group then leaves the job,
        but for a revoke (a group made with enable_reconfigure), which stays for the
        reconfigure that recovers from it.

        Never raises, and waits for no peer.
        """
        owner = self._owner
        self._aborted = True
        self._break(AbortedError(f"{owner._named} was aborted on global rank "
                                 f"{owner._group.global_rank} (ProcessGroup.abort)"))
        if not self.revocable:
            self.shutdown(abandon=True)

    def renewed(self) -> None:
        """The group runs a new communicator (a reconfigure): this rank's abort was of the
        old one."""
        self._aborted = False

    def get_error(self) -> Any:
        """What broke the group, in torch's terms (an ErrorType).

        SUCCESS while it is intact; TIMEOUT after an operation timed out;
        REMOTE_ERROR when another member was lost, left or aborted; COMM_ERROR
        for anything else, this rank's own abort included, but for a group made
        with enable_reconfigure, where that abort is a revoke (SUCCESS, as gloo).
        """
        owner = self._owner
        kinds = torch._C._distributed_c10d.ErrorType
        error = owner._group.failure()
        here = owner._failed_here
        if error is None and here is not None and here[0] is owner._group:
            error = here[1]  # failed in the caller's thread: the loop records it later
        if self._aborted and self.revocable and (error is None or
                                                 isinstance(error, AbortedError)):
            return kinds.SUCCESS
        if error is None:
            return kinds.COMM_ERROR if self._aborted else kinds.SUCCESS
        if isinstance(error, CollectiveTimeoutError):
            return kinds.TIMEOUT
        if isinstance(error, (PeerLostError, ExcludedError)) or (
                isinstance(error, AbortedError) and not self._aborted):
            return kinds.REMOTE_ERROR
        return kinds.COMM_ERROR

    @property
    def supports_shrinking(self) -> bool:
        """Whether shrink() can make a group of this one's other members: every group but a
        default group over the blocking API's world (asyncoll:// has asyncoll.reconfigure)."""
        owner = self._owner
        return not owner._owns_world or owner._world.owns_job

    @through_torch
    def shrink(self, ranks_to_exclude: Iterable[int], shrink_flags: int = 0,
               opts_override: Any = None) -> ShrunkBackend:
        """A c10d Backend running this group without ``ranks_to_exclude`` (group ranks).

        Every remaining member calls it; excluded members need not be alive.
        With SHRINK_ABORT, this rank's operations of the group in flight fail
        first (AbortedError, told to the others); else they are waited for.

        The new group keeps this one's set_timeout, which is also the deadline
        of the shrink itself. Errors are torch's (asyncoll._torch_backend.errors).

        Raises:
            ConfigurationError: a rank out of range, this rank, or every rank.
            RendezvousTimeoutError: the other remaining members did not call it
                within the group's timeout (the default group's shrink).
        """
        owner = self._owner
        size, me = owner._group.size, owner._group.rank
        excluded = sorted({int(r) for r in ranks_to_exclude})
        if not excluded or excluded[0] < 0 or excluded[-1] >= size or len(excluded) == size:
            raise ConfigurationError(f"shrink_group cannot exclude ranks {excluded} of a group "
                                     f"of {size}: give 1 to {size - 1} ranks from 0 to "
                                     f"{size - 1}")
        if me in excluded:
            raise ConfigurationError(f"rank {me} of {owner._named} called shrink_group that "
                                     "excludes it: only the ranks that stay call it")
        limit = owner._default_limit or owner._group.timeout
        if shrink_flags & SHRINK_ABORT:
            self._break(AbortedError(f"{owner._named} was aborted by shrink_group("
                                     f"SHRINK_ABORT) on global rank {owner._group.global_rank}"))
        else:
            concurrent.futures.wait([owner._latest], limit)
        leaving = tuple(owner._group.ranks[r] for r in excluded)
        if owner._owns_world:
            # The default group: the job's next generation, numbered as torch numbers it.
            session = owner._world.world.session
            owner._world.world = aio.World(owner._world.runtime.run(
                session.reconfigure(limit, without=leaving)))
            # torch shuts this group down next: the job is the new group's now.
            owner._owns_world = False
            shrunk = ShrunkBackend(owner._world, owner._world.world, owns_world=True)
        else:
            keep = [r for r in owner._group.ranks if r not in leaving]
            shrunk = ShrunkBackend(owner._world, AsyncProcessGroup(
                owner._world.world.session, members_only_id(
                    f"{owner._group.group_id}/shrunk/{','.join(map(str, excluded))}"),
                keep, limit), owns_world=False)
        shrunk._default_limit = owner._default_limit
        return shrunk

    def _break(self, error: AsyncollError) -> None:
        """Fail the group's operations with ``error`` here and on its members (on the loop)."""
        owner = self._owner
        if owner._world.closed:
            return  # the job was left: nothing runs, and nobody is there to tell

        async def breaking() -> None:
            owner._group.abort(error)

        try:
            owner._world.runtime.run(breaking())
        except Exception:  # noqa: BLE001 - abort must always finish
            log.exception("asyncoll: error while aborting %s", owner._named)



class Recoverable:
    """torch's abort, shutdown, get_error, shrink and supports_shrinking, as the group's
    own: its Recovery part's (``self._recovery``), bound as the group is made."""

    _recovery: Recovery

    abort = Delegate("_recovery", Recovery.abort)
    shutdown = Delegate("_recovery", Recovery.shutdown)
    get_error = Delegate("_recovery", Recovery.get_error)
    shrink = Delegate("_recovery", Recovery.shrink)

    @property
    def supports_shrinking(self) -> bool:
        """Whether shrink() can make a group of this one's other members."""
        return self._recovery.supports_shrinking


class ShrunkBackend(TorchCollectives, Recoverable, BackendCapabilities,
                    _BackendBase):  # type: ignore[misc]
    """The c10d Backend of a group that shrink_group made; torch runs it under a plain
    ProcessGroup of fixed rank and size, so it can shrink again, not reconfigure.

    Args:
        world: the asyncoll job and its threads.
        group: the asyncoll group of the remaining members.
        owns_world: this group leaves the job at its end (the shrunk default group).
    """

    # torch's trampoline reads this name on the Python object (device_backend.py).
    supports_reconfigure = False

    def __init__(self, world: TorchWorld, group: AsyncProcessGroup, owns_world: bool) -> None:
        super().__init__(group.rank, group.size)
        self._world = world
        self._group = group
        self._owns_world = owns_world
        self._named = group_words(group)
        self._latest = DONE
        self._recovery = Recovery(self)
        bind(self)

    def getBackendName(self) -> str:
        """The backend's name, "asyncoll"."""
        return "asyncoll"

    def __repr__(self) -> str:
        return self._named


def group_words(group: AsyncProcessGroup) -> str:
    """How every Work names the group: made once, not per call."""
    return f"<AsyncollProcessGroup ranks={list(group.ranks)}>"
