"""What a member re-registers with a restarted coordinator, kept as its session goes.

A coordinator keeps nothing on disk; the members hold the truth about their
job (issue 28). Each session counts what the coordinator has seen from it
(new_group calls, membership checks, monitored barriers), the groups the
coordinator made, and the ranks it knows are gone, so that its Rejoin can
say so. A request still waiting for its answer when the link drops is sent
again to the next coordinator, so it is not counted as seen.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._wire.compact import pack_runs
from asyncoll._wire.messages import GroupRecord, Rejoin, Welcome


@dataclass(frozen=True, slots=True)
class Identity:
    """Who this member is in its job's generation, as its Rejoin states it."""

    job: str
    rank: int
    world_size: int
    generation: int
    host: str
    port: int
    hostname: str
    heartbeat_timeout: float
    elastic: bool
    min_size: int
    max_size: int
    #: A hash of the Welcome's packed directory: every member's is the same.
    directory_digest: str
    #: What reconfigures that list their members name this process by.
    token: str = ""

    @property
    def bounds(self) -> tuple[bool, int, int]:
        """(elastic, min_size, max_size)."""
        return self.elastic, self.min_size, self.max_size

    @classmethod
    def of(cls, welcome: Welcome, job: str, address: tuple[str, int], hostname: str,
           heartbeat_timeout: float, bounds: tuple[bool, int, int],
           token: str = "") -> Identity:
        """This member of the membership ``welcome`` made, at data ``address``."""
        elastic, min_size, max_size = bounds
        digest = hashlib.blake2b(welcome.directory, digest_size=8).hexdigest()
        return cls(job, welcome.rank, welcome.world_size, welcome.generation, *address,
                   hostname, heartbeat_timeout, elastic, min_size, max_size, digest, token)


@dataclass(slots=True)
class Calls:
    """Requests of one kind sent to the coordinator, and how many await their answer."""

    made: int = 0
    waiting: int = 0

    @property
    def seen(self) -> int:
        """The requests the coordinator has answered: the ones it has seen for sure."""
        return self.made - self.waiting

    @contextlib.contextmanager
    def awaiting(self) -> Iterator[None]:
        """Count a request; while its answer is awaited, it counts as unseen."""
        self.made += 1
        self.waiting += 1
        try:
            yield
        finally:
            self.waiting -= 1


@dataclass(slots=True)
class Registration:
    """A session's record of what the coordinator has seen from it."""

    identity: Identity
    #: The coordinator's groups, by id (0: every rank), in this generation.
    groups: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: Monitored barriers started per group, and the groups with one in flight.
    barriers: dict[int, int] = field(default_factory=dict)
    _barriers_waiting: set[int] = field(default_factory=set)
    #: new_group calls and membership checks.
    new_groups: Calls = field(default_factory=Calls)
    checks: Calls = field(default_factory=Calls)
    #: The ranks this member knows are gone (left, or lost).
    gone: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.groups[0] = tuple(range(self.identity.world_size))

    @contextlib.contextmanager
    def barrier(self, group_id: int) -> Iterator[int]:
        """Number the group's next monitored barrier, and count it as unseen until answered."""
        seq = self.barriers.get(group_id, 0) + 1
        self.barriers[group_id] = seq
        self._barriers_waiting.add(group_id)
        try:
            yield seq
        finally:
            self._barriers_waiting.discard(group_id)

    def rejoin(self, epoch: int) -> Rejoin:
        """This member's re-registration, ``epoch`` the newest membership event it heard of."""
        me = self.identity
        groups = tuple(GroupRecord(group_id=g, runs=pack_runs(ranks),
                                   barriers=self.barriers.get(g, 0) - (
                                       g in self._barriers_waiting))
                       for g, ranks in sorted(self.groups.items()))
        return Rejoin(job=me.job, rank=me.rank, world_size=me.world_size,
                      generation=me.generation, version=PROTOCOL_VERSION, host=me.host,
                      port=me.port, hostname=me.hostname, pid=os.getpid(),
                      heartbeat_timeout=me.heartbeat_timeout, elastic=int(me.elastic),
                      min_size=me.min_size, max_size=me.max_size,
                      directory_digest=me.directory_digest, groups=groups,
                      new_group_calls=self.new_groups.seen, checks=self.checks.seen,
                      gone=pack_runs(tuple(sorted(self.gone - {me.rank}))), epoch=epoch,
                      token=me.token)
