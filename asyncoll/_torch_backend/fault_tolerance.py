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

``Recovery`` is what both shapes of an asyncoll torch group share (its own
ProcessGroup, and the ``ShrunkBackend`` a shrink gives, which torch runs
under a plain ProcessGroup); ``Reconfigurable`` is the ProcessGroup's own.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterable
from typing import Any

import torch

from asyncoll import aio
from asyncoll._group.core import DONE
from asyncoll._runtime.session import Rendezvous
from asyncoll._runtime.settings import settings_at_join
from asyncoll._torch_backend.collectives import TorchCollectives
from asyncoll._torch_backend.group_ids import members_only_id
from asyncoll._torch_backend.handles import Handle, target
from asyncoll._torch_backend.work import AsyncollWork
from asyncoll._torch_backend.world import TorchWorld
from asyncoll._wire.endpoint import split_host_port
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


class Recovery:
    """abort, shutdown, get_error and shrink of one asyncoll torch group."""

    _world: TorchWorld
    _group: AsyncProcessGroup
    _named: str
    _latest: concurrent.futures.Future[Any]
    #: Whether this group is the job's default group (it leaves the job at its end).
    _owns_world: bool
    #: Set once abort() was called on this rank.
    _aborted = False

    def shutdown(self) -> None:
        """Leave the asyncoll job when this group owns it; join its threads."""
        if self._owns_world:
            self._world.shutdown()

    def abort(self) -> None:
        """Fail this group's operations, running and to come, with AbortedError at once, here
        and on the other members (told by this rank); the default group then leaves the job.

        Never raises, and waits for no peer.
        """
        self._aborted = True
        self._break(AbortedError(f"{self._named} was aborted on global rank "
                                 f"{self._group.global_rank} (ProcessGroup.abort)"))
        self.shutdown()

    def get_error(self) -> Any:
        """What broke the group, in torch's terms (an ErrorType).

        SUCCESS while it is intact; TIMEOUT after an operation timed out;
        REMOTE_ERROR when another member was lost, left or aborted; COMM_ERROR
        for anything else, this rank's own abort included.
        """
        kinds = torch._C._distributed_c10d.ErrorType
        error = self._group.failure()
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
        return not self._owns_world or self._world.owns_job

    def shrink(self, ranks_to_exclude: Iterable[int], shrink_flags: int = 0,
               opts_override: Any = None) -> ShrunkBackend:
        """A c10d Backend running this group without ``ranks_to_exclude`` (group ranks).

        Every remaining member calls it; excluded members need not be alive.
        With SHRINK_ABORT, this rank's operations of the group in flight fail
        first (AbortedError, told to the others); else they are waited for.

        Raises:
            ConfigurationError: a rank out of range, this rank, or every rank.
            RendezvousTimeoutError: the other remaining members did not call it
                within the group's timeout (the default group's shrink).
        """
        size, me = self._group.size, self._group.rank
        excluded = sorted({int(r) for r in ranks_to_exclude})
        if not excluded or excluded[0] < 0 or excluded[-1] >= size or len(excluded) == size:
            raise ConfigurationError(f"shrink_group cannot exclude ranks {excluded} of a group "
                                     f"of {size}: give 1 to {size - 1} ranks from 0 to "
                                     f"{size - 1}")
        if me in excluded:
            raise ConfigurationError(f"rank {me} of {self._named} called shrink_group that "
                                     "excludes it: only the ranks that stay call it")
        limit = self._group.timeout
        if shrink_flags & SHRINK_ABORT:
            self._break(AbortedError(f"{self._named} was aborted by shrink_group("
                                     f"SHRINK_ABORT) on global rank {self._group.global_rank}"))
        else:
            concurrent.futures.wait([self._latest], limit)
        leaving = tuple(self._group.ranks[r] for r in excluded)
        if self._owns_world:
            # The default group: the job's next generation, numbered as torch numbers it.
            session = self._world.world.session
            self._world.world = aio.World(self._world.runtime.run(
                session.reconfigure(limit, without=leaving)))
            # torch shuts this group down next: the job is the new group's now.
            self._owns_world = False
            return ShrunkBackend(self._world, self._world.world, owns_world=True)
        keep = [r for r in self._group.ranks if r not in leaving]
        group = AsyncProcessGroup(self._world.world.session, members_only_id(
            f"{self._group.group_id}/shrunk/{','.join(map(str, excluded))}"), keep, limit)
        return ShrunkBackend(self._world, group, owns_world=False)

    def _break(self, error: AsyncollError) -> None:
        """Fail the group's operations with ``error`` here and on its members (on the loop)."""
        if self._world.closed:
            return  # the job was left: nothing runs, and nobody is there to tell

        async def breaking() -> None:
            self._group.abort(error)

        try:
            self._world.runtime.run(breaking())
        except Exception:  # noqa: BLE001 - abort must always finish
            log.exception("asyncoll: error while aborting %s", self._named)


class Reconfigurable(Recovery):
    """torch's reconfigure of an asyncoll default group (a ProcessGroup of its own)."""

    #: The uuids of this group's reconfigures so far (each must be new).
    _uuids: set[int]

    @property
    def supports_reconfigure(self) -> bool:
        """Whether reconfigure() can re-form this group: the default group of a torch job."""
        return self._owns_world and self._world.owns_job

    def get_reconfigure_handle(self) -> str:
        """The handle naming this process, for the others' reconfigure (see handles.py)."""
        self._need_reconfigurable()
        session = self._world.world.session
        host, port = split_host_port(session.client.address, "the coordinator's address")
        return str(Handle(host, port, session.job, session.token, session.rank,
                          session.world_size, session.generation))

    def reconfigure(self, opts: Any) -> AsyncollWork:
        """Re-form the group of the processes ``opts.handles`` name, and return a completed Work.

        A list ranks them by position; a set keeps the survivors' order, with
        the newcomers after them. A new process (alone in a job of its own)
        named with the members of a running job leaves its own and joins that one.
        Every process named calls it with the same handles; the others are
        excluded. On failure this group is as it was.

        Raises:
            ConfigurationError: no handles, a handle twice or not asyncoll's,
                handles of several running jobs, none naming this process, or a
                used uuid.
            RendezvousTimeoutError: a process named did not take part within
                ``opts.timeout`` (the group's timeout when not given).
        """
        self._need_reconfigurable()
        given = list(opts.handles)
        handles = [Handle.parse(h) for h in given]
        uuid = int(opts.uuid)
        if not handles:
            raise ConfigurationError("reconfigure needs at least one handle")
        tokens = tuple(h.token for h in handles)
        if len(set(tokens)) != len(tokens):
            raise ConfigurationError(f"reconfigure was given a process twice among its "
                                     f"{len(tokens)} handles: each handle must be given once")
        if uuid in self._uuids:
            raise ConfigurationError(f"reconfigure uuid {uuid} was already used on this group; "
                                     "each reconfigure needs a new uuid")
        session = self._world.world.session
        if session.token not in tokens:
            raise ConfigurationError(
                f"none of the {len(tokens)} reconfigure handles names this process (its "
                f"handle is {self.get_reconfigure_handle()!r}): a process takes part only "
                "in a reconfigure that names it")
        limit = (opts.timeout.total_seconds() if opts.timeout is not None
                 else self._group.timeout)
        ordered = isinstance(opts.handles, (list, tuple))
        into = target(handles)
        runtime = self._world.runtime
        if into.job == session.job:
            new = runtime.run(session.reconfigure(limit, named=tokens, ordered=ordered,
                                                  uuid=uuid))
        else:
            # A new process: it joins that job, pending until the others' reconfigure
            # admits it, and only then leaves the one of its own.
            new = runtime.run(runtime.join(Rendezvous(
                host=into.host, port=into.port, job=into.job, world_size=1, rank=-1,
                timeout=limit, may_host=False, elastic=True, token=session.token),
                settings_at_join()))
            runtime.run(self._world.world.destroy())
        self._uuids.add(uuid)
        self._world.world = self._group = aio.World(new)
        self._named = group_words(self._group)
        return AsyncollWork(DONE, [], f"reconfigure on {self._named}", self._world)

    def _need_reconfigurable(self) -> None:
        if not self.supports_reconfigure:
            raise ConfigurationError(
                f"{self._named} cannot be reconfigured: only the default group of a job "
                "asyncoll's torch backend started can (with init_method 'asyncoll://', call "
                "asyncoll.reconfigure() instead)")


class ShrunkBackend(TorchCollectives, Recovery, _BackendBase):  # type: ignore[misc]
    """The c10d Backend of a group that shrink_group made; torch runs it under a plain
    ProcessGroup of fixed rank and size, so it can shrink again, not reconfigure.

    Args:
        world: the asyncoll job and its threads.
        group: the asyncoll group of the remaining members.
        owns_world: this group leaves the job at its end (the shrunk default group).
    """

    # torch's trampoline reads these names on the Python object (device_backend.py).
    supports_coalescing = False
    supports_splitting = False
    supports_reconfigure = False
    supports_time_estimate = False
    supports_window = False
    supports_tensor_alloc = False

    def __init__(self, world: TorchWorld, group: AsyncProcessGroup, owns_world: bool) -> None:
        super().__init__(group.rank, group.size)
        self._world = world
        self._group = group
        self._owns_world = owns_world
        self._named = group_words(group)
        self._latest = DONE

    def getBackendName(self) -> str:
        """The backend's name, "asyncoll"."""
        return "asyncoll"

    def __repr__(self) -> str:
        return self._named


def group_words(group: AsyncProcessGroup) -> str:
    """How every Work names the group: made once, not per call."""
    return f"<AsyncollProcessGroup ranks={list(group.ranks)}>"
