"""torch's reconfigure of an asyncoll default group: handles in, the next generation out.

``dist._reconfigure(uuid, handles, timeout)`` reaches the default group's
Reconfigurer, which turns the handles into the coordinator's reconfigure to
exactly those processes (asyncoll._rendezvous.elastic.Terms): a list ranks
them by position, a set keeps the survivors' order with the newcomers after
them. A new process, alone in a job of its own, named with the members of a
running job, joins that job instead, pending until their reconfigure admits it.
"""

from __future__ import annotations

from typing import Any

from asyncoll import aio
from asyncoll._group.core import DONE
from asyncoll._runtime.session import Rendezvous, Session
from asyncoll._runtime.settings import settings_at_join
from asyncoll._torch_backend.fault_tolerance import TorchGroup, group_words
from asyncoll._torch_backend.handles import Handle, target
from asyncoll._torch_backend.work import AsyncollWork
from asyncoll._wire.endpoint import split_host_port
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

    def get_reconfigure_handle(self) -> str:
        """The handle naming this process, for the others' reconfigure (see handles.py)."""
        session = self._session()
        host, port = split_host_port(session.client.address, "the coordinator's address")
        return str(Handle(host, port, session.job, session.token, session.rank,
                          session.world_size, session.generation))

    def reconfigure(self, opts: Any) -> AsyncollWork:
        """Re-form the group of the processes ``opts.handles`` name, and return a completed Work.

        Every process named calls it with the same handles and a new uuid; the
        others are excluded from the job. On failure the group is as it was.

        Raises:
            ConfigurationError: no handles, a handle twice or not asyncoll's,
                handles of several running jobs, none naming this process, or a
                used uuid.
            MismatchError: another member passed other handles.
            RendezvousTimeoutError: a process named did not take part within
                ``opts.timeout`` (the group's timeout when not given).
        """
        session = self._session()
        handles = self._checked([Handle.parse(h) for h in opts.handles], int(opts.uuid),
                                session.token)
        owner = self._owner
        limit = (opts.timeout.total_seconds() if opts.timeout is not None
                 else owner._group.timeout)
        new = self._next_session(session, handles, isinstance(opts.handles, (list, tuple)),
                                 int(opts.uuid), limit)
        self._uuids.add(int(opts.uuid))
        owner._world.world = owner._group = aio.World(new)
        owner._named = group_words(owner._group)
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

    def _next_session(self, session: Session, handles: list[Handle], ordered: bool,
                      uuid: int, limit: float) -> Session:
        """The session of the membership ``handles`` name, in this job or the one joined."""
        runtime = self._owner._world.runtime
        tokens = tuple(h.token for h in handles)
        into = target(handles)
        if into.job == session.job:
            return runtime.run(session.reconfigure(limit, named=tokens, ordered=ordered,
                                                   uuid=uuid))
        # A new process: it joins that job, pending until the others' reconfigure
        # admits it, and only then leaves the one of its own.
        new = runtime.run(runtime.join(Rendezvous(
            host=into.host, port=into.port, job=into.job, world_size=1, rank=-1,
            timeout=limit, may_host=False, elastic=True, token=session.token),
            settings_at_join()))
        runtime.run(self._owner._world.world.destroy())
        return new

    def _session(self) -> Session:
        if not self.supports_reconfigure:
            raise ConfigurationError(
                f"{self._owner._named} cannot be reconfigured: only the default group of a "
                "job asyncoll's torch backend started can (with init_method 'asyncoll://', "
                "call asyncoll.reconfigure() instead)")
        return self._owner._world.world.session
