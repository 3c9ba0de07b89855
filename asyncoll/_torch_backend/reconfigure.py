"""torch's reconfigure of an asyncoll default group: handles in, a new communicator out.

``dist._reconfigure(uuid, handles, timeout)`` reaches the default group's
Reconfigurer, which forms a communicator of exactly the processes the
handles name (asyncoll._torch_backend.handles): an asyncoll job of its own,
named after the uuid, on the coordinator the first member hosts (every
process that hands out a handle hosts one: a communicator never needs a
process outside it, rank 0 of the torch job included), ranked by the list's
order (a set: an order every process computes alike). Each process
named joins it, and only once all have joined leaves the communicator it
had; a process not named keeps its own and can form others later. So
disjoint sets of processes may reconfigure at the same time, and a process
left out rejoins by its handle.
"""

from __future__ import annotations

from typing import Any

from asyncoll import aio
from asyncoll._group.core import DONE
from asyncoll._runtime.session import Rendezvous, Session
from asyncoll._runtime.settings import settings_at_join
from asyncoll._torch_backend.errors import through_torch
from asyncoll._torch_backend.fault_tolerance import TorchGroup, group_words
from asyncoll._torch_backend.handles import (
    Handle,
    communicator_job,
    convener,
    in_rank_order,
    root_of,
)
from asyncoll._torch_backend.work import AsyncollWork
from asyncoll.errors import ConfigurationError


class Reconfigurer:
    """The reconfigure of one torch default group, a part of it.

    Args:
        owner: the AsyncollProcessGroup, whose asyncoll group a reconfigure replaces.
    """

    def __init__(self, owner: TorchGroup) -> None:
        self._owner = owner
        #: The uuids of this group's reconfigures so far (each must be new).
        self._uuids: set[int] = set()

    @property
    def supports_reconfigure(self) -> bool:
        """Whether reconfigure() can re-form this group: the default group of a torch job."""
        return self._owner._owns_world and self._owner._world.owns_job

    @through_torch
    def get_reconfigure_handle(self) -> str:
        """The handle naming this process, for the others' reconfigure (see handles.py)."""
        session = self._session()
        host, port = self._owner._world.hosted()
        return str(Handle(host, port, root_of(session.job), session.token,
                          self._owner._world.origin))

    @through_torch
    def reconfigure(self, opts: Any) -> AsyncollWork:
        """Form the communicator of the processes ``opts.handles`` name; return a completed Work.

        Every process named calls it with the same uuid and handles; the others
        are not affected. On failure the group is as it was.

        Raises (each as torch's error too, asyncoll._torch_backend.errors):
            ConfigurationError: no handles, a handle twice or not asyncoll's,
                none naming this process, or a uuid already used.
            MismatchError: another member passed other handles.
            RendezvousTimeoutError: a process named did not take part within
                ``opts.timeout`` (the group's timeout when not given).
        """
        session = self._session()
        uuid = int(opts.uuid)
        members = in_rank_order(self._checked([Handle.parse(h) for h in opts.handles], uuid,
                                              session.token),
                                isinstance(opts.handles, (list, tuple)))
        owner = self._owner
        limit = (opts.timeout.total_seconds() if opts.timeout is not None
                 else owner._group.timeout)
        new = self._joined(session, members, uuid, limit)
        self._uuids.add(uuid)
        old, owner._world.world = owner._world.world, aio.World(new)
        owner._group = owner._world.world
        owner._named = group_words(owner._group)
        owner._latest = DONE
        owner._recovery.renewed()
        # Only now that the new communicator stands: the one this process had.
        owner._world.runtime.run(old.destroy())
        return AsyncollWork(DONE, [], f"reconfigure on {owner._named}", owner._world)

    def _checked(self, handles: list[Handle], uuid: int, mine: str) -> list[Handle]:
        """``handles``, refused as gloo refuses them (before anything is sent)."""
        tokens = [h.token for h in handles]
        if not handles:
            raise ConfigurationError("reconfigure needs at least one handle")
        if len(set(tokens)) != len(tokens):
            raise ConfigurationError(f"reconfigure was given a process twice among its "
                                     f"{len(tokens)} handles: each handle must be given once")
        if uuid in self._uuids:
            raise ConfigurationError(f"reconfigure uuid {uuid} was already used on this group; "
                                     "each reconfigure needs a new uuid")
        if mine not in tokens:
            raise ConfigurationError(
                f"none of the {len(tokens)} reconfigure handles names this process (its "
                f"handle is {self.get_reconfigure_handle()!r}): a process takes part only "
                "in a reconfigure that names it")
        return handles

    def _joined(self, session: Session, members: list[Handle], uuid: int,
                limit: float) -> Session:
        """This process's session in the communicator ``uuid`` of ``members`` (in rank order)."""
        at = convener(members)
        rank = [h.token for h in members].index(session.token)
        where = Rendezvous(host=at.host, port=at.port, job=communicator_job(at.root, uuid),
                           world_size=len(members), rank=rank, timeout=limit, may_host=False,
                           elastic=True, fallbacks=self._owner._world.fallbacks,
                           token=session.token)
        runtime = self._owner._world.runtime
        return runtime.run(runtime.join(where, settings_at_join()))

    def _session(self) -> Session:
        if not self.supports_reconfigure:
            raise ConfigurationError(
                f"{self._owner._named} cannot be reconfigured: only the default group of a "
                "job asyncoll's torch backend started can (with init_method 'asyncoll://', "
                "call asyncoll.reconfigure() instead)")
        return self._owner._world.world.session
