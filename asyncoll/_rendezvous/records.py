"""The coordinator's records of its jobs: members, waiting peers, agreements.

Plain data that :mod:`asyncoll._rendezvous.state` decides on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asyncoll._rendezvous.stragglers import Arrivals, Clock, Doing
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
    #: What reconfigures that list their members name it by (its Join's token).
    token: str = ""
    last_heartbeat: float | None = None
    #: Operations per second between its last two heartbeats.
    ops_rate: float = 0.0
    #: What its last heartbeat said it was doing, and its clock's offset.
    doing: Doing | None = None
    clock: Clock = field(default_factory=Clock)


@dataclass(slots=True)
class Gathering:
    """An agreement that completes when every rank in ``expected`` has arrived."""

    what: str
    expected: frozenset[int]
    deadline: float
    started: float
    timeout_code: str
    arrivals: dict[int, tuple[int, int, object]] = field(default_factory=dict)
    #: What every arrival must agree on (a reconfigure's membership), if anything.
    terms: object = None

    def complete(self) -> bool:
        """Whether every expected rank has arrived (only expected ranks are let in)."""
        return len(self.arrivals) == len(self.expected)

    def still_expected(self, departed: set[int]) -> int:
        """How many expected ranks have not departed (in O(departed), not O(expected))."""
        return len(self.expected) - len(self.expected & departed)


@dataclass(slots=True, eq=False)
class Job:
    name: str
    world_size: int
    deadline: float
    started: float
    heartbeat_timeout: float
    running_since: float = 0.0
    waiting: dict[int, Waiter] = field(default_factory=dict)
    #: The waiting peers that asked for a rank, by that rank.
    requested: dict[int, Waiter] = field(default_factory=dict)
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
    #: Members that left since the last notice of a leave, to be told in one
    #: notice: (rank, its connection, its leave's request id, the leave's epoch).
    #: Each leave is answered only once the others are told, so that nothing
    #: the leaver does next (closing its links) can reach them first.
    unannounced: list[tuple[int, int, int, int]] = field(default_factory=list)
    #: When the members were last told of a leave.
    left_told_at: float = float("-inf")
    #: No member's heartbeat can be overdue before this time: the heartbeats
    #: are scanned only then, not at every tick.
    heartbeats_due: float = 0.0
    #: The last line on who is missing from the rendezvous: (what it was made
    #: of, when, the line), so that N waiting peers asking cost O(N), not O(N^2).
    missing: tuple[tuple[int, int], float, str] = ((-1, -1), 0.0, "")
    #: The waiting peers that the line is for: the first on each host, so that a
    #: large job logs a line per host rather than per rank.
    speakers: frozenset[int] = frozenset()
    #: Being taken back by a restarted coordinator (see asyncoll._rendezvous.adoption):
    #: the members re-registered so far, by rank, and the ranks any of them knows gone.
    adopting: bool = False
    #: When an adopting job is adopted with a majority, if not all come before.
    adopt_by: float = 0.0
    rejoins: dict[int, Rejoining] = field(default_factory=dict)
    known_gone: set[int] = field(default_factory=set)
    #: The Welcome directory's hash that every re-registration must share.
    directory_digest: str = ""
    #: What the members had completed before an adoption, for the calls they
    #: send again after it: the most new_group calls and membership checks of
    #: any member, and each group's last monitored barrier. 0 and empty when
    #: not adopted, and cleared at a reconfigure.
    adopted_new_groups: int = 0
    adopted_checks: int = 0
    adopted_barriers: dict[int, int] = field(default_factory=dict)
    #: The members' sampled arrival times, for its stragglers.
    arrivals: Arrivals = field(default_factory=Arrivals)

    def live(self) -> list[int]:
        """The ranks of the members that have not left, in order."""
        return [r for r in sorted(self.members) if r not in self.departed]


@dataclass(slots=True)
class Rejoining:
    """A member that re-registered with a restarted coordinator: its record, installed
    when the job is adopted, and the request that the adoption answers."""

    member: Member
    request_id: int


def error(conn: int, request_id: int, code: str, message: str) -> Reply:
    return Reply(conn, request_id, Error(code=code, message=message))
