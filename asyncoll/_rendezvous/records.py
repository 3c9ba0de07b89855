"""The coordinator's records of its jobs: members, waiting peers, agreements.

Plain data that :mod:`asyncoll._rendezvous.state` decides on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asyncoll._wire.messages import Error, Join, Message, PeerInfo


@dataclass(frozen=True, slots=True)
class Reply:
    """Send ``message`` as the answer to request ``request_id`` on connection ``conn``."""

    conn: int
    request_id: int
    message: Message


@dataclass(slots=True)
class Waiter:
    """A peer waiting for the rendezvous, or pending admission to a running elastic job."""

    conn: int
    request_id: int
    join: Join
    order: int
    #: A pending peer's own deadline (its join's timeout); rendezvous use the job's.
    deadline: float = 0.0


@dataclass(slots=True)
class Member:
    """A running member of a job."""

    conn: int
    info: PeerInfo
    pid: int
    ops: int = -1
    last_heartbeat: float | None = None


@dataclass(slots=True)
class Gathering:
    """An agreement that completes when every rank in ``expected`` has arrived."""

    what: str
    expected: frozenset[int]
    deadline: float
    started: float
    timeout_code: str
    arrivals: dict[int, tuple[int, int, object]] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class Job:
    name: str
    world_size: int
    deadline: float
    started: float
    heartbeat_timeout: float
    running_since: float = 0.0
    waiting: dict[int, Waiter] = field(default_factory=dict)
    members: dict[int, Member] = field(default_factory=dict)
    conn_rank: dict[int, int] = field(default_factory=dict)
    running: bool = False
    departed: set[int] = field(default_factory=set)
    new_group_calls: dict[int, int] = field(default_factory=dict)
    groups: dict[int, tuple[int, ...]] = field(default_factory=dict)
    gatherings: dict[tuple[object, ...], Gathering] = field(default_factory=dict)
    #: Elastic jobs: a running job takes joins as pending peers, and a
    #: reconfigure renumbers the live members and admits the pending ones.
    elastic: bool = False
    min_size: int = 0
    max_size: int = 0
    #: One more at each reconfigure.
    generation: int = 0
    pending: dict[int, Waiter] = field(default_factory=dict)
    #: Per rank, how many membership checks it made in this generation.
    checks: dict[int, int] = field(default_factory=dict)
    #: Membership events so far (a member gone, a process pending or giving
    #: up), across generations: what members' notices and answers are dated by.
    epoch: int = 0

    def live(self) -> list[int]:
        """The ranks of the members that have not left, in order."""
        return [r for r in sorted(self.members) if r not in self.departed]


def error(conn: int, request_id: int, code: str, message: str) -> Reply:
    return Reply(conn, request_id, Error(code=code, message=message))


def ranks_text(ranks: object) -> str:
    items = sorted(ranks)  # type: ignore[call-overload]
    return ", ".join(str(r) for r in items) if items else "none"
