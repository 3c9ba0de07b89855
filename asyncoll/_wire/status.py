"""Control-plane messages that anyone may send the coordinator without joining.

A job's status (for operators, and the peers waiting in its rendezvous),
who is missing from a rendezvous, and asking a job's members to write out
their flight recorders. They are encoded like every other message:
:mod:`asyncoll._wire.messages` lists them and names them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class Status:
    """Anyone -> coordinator: describe job ``job`` ("" for every job); no join needed."""

    TYPE: ClassVar[str] = "status"
    job: str


@dataclass(frozen=True, slots=True)
class WhoIsMissing:
    """Peer -> coordinator: who has not joined job ``job`` yet? (a waiting peer asks)."""

    TYPE: ClassVar[str] = "who_is_missing"
    job: str


@dataclass(frozen=True, slots=True)
class DumpTrace:
    """Anyone -> coordinator: ask every running member of job ``job`` ("" for every job)
    to write out its flight recorder (answered with a StatusReply of those jobs); and
    coordinator -> each of those members, as a notice (id 0): write it out."""

    TYPE: ClassVar[str] = "dump_trace"
    job: str


@dataclass(frozen=True, slots=True)
class MissingReply:
    """Coordinator -> peer: one line naming who is missing ("" once the job runs)."""

    TYPE: ClassVar[str] = "missing_reply"
    line: str


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """One peer of a job, as the coordinator sees it."""

    rank: int
    host: str
    port: int
    hostname: str
    pid: int
    #: "waiting" (in rendezvous; rank -1 if not requested), "pending" (asking to
    #: join a running elastic job; rank -1), "running" or "left".
    state: str
    #: Operations the peer reported in its last heartbeat (-1: none yet).
    ops: int
    #: Seconds since its last heartbeat (-1: none yet).
    heartbeat_age_s: float
    #: Its operation, as its last heartbeat told ("all_reduce #813 of group 0,
    #: running for 14 s"; "" if none yet).
    operation: str = ""


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """One group of a job."""

    group_id: int
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StragglerStatus:
    """A rank its group's other members wait for (see asyncoll._rendezvous.stragglers)."""

    group_id: int
    rank: int
    #: Sampled operations it arrived last and late in, of ``operations``.
    last: int
    operations: int
    median_late_s: float


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One job: its rendezvous or running state, members and groups."""

    job: str
    state: str
    world_size: int
    age_s: float
    members: tuple[MemberStatus, ...]
    groups: tuple[GroupStatus, ...]
    #: The membership's generation (see Welcome); an elastic job's size bounds (0: none).
    generation: int = 0
    elastic: int = 0
    min_size: int = 0
    max_size: int = 0
    #: Ranks that others have waited on for seconds, in words (see MemberStatus.operation).
    stuck: tuple[str, ...] = ()
    stragglers: tuple[StragglerStatus, ...] = ()

    def running_generation(self, generation: int) -> bool:
        """Whether this is the job running at ``generation`` (not a newer rendezvous of
        the same id, say)."""
        return self.state == "running" and self.generation == generation


@dataclass(frozen=True, slots=True)
class StatusReply:
    """Coordinator -> anyone: the jobs asked about."""

    TYPE: ClassVar[str] = "status_reply"
    jobs: tuple[JobStatus, ...]
