"""The messages with which a restarted coordinator takes a running job back (issue 28).

Defined apart from :mod:`asyncoll._wire.messages`, which names them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One of a member's groups, as it re-registers it (see Rejoin).

    ``runs`` are the group's ranks (see NewGroup); ``barriers`` how many of
    its monitored barriers this member completed.
    """

    group_id: int
    runs: tuple[int, ...]
    barriers: int


@dataclass(frozen=True, slots=True)
class Rejoin:
    """Peer -> a restarted coordinator, first on a new connection: take my job back.

    Everything the member knows of its job and its own place in it: the
    job's size, generation and directory (``directory_digest``, a hash of the
    Welcome's packed directory, for agreement), this member's data address,
    the coordinator's groups it holds (group 0 included), how many new_group
    calls and membership checks the coordinator has seen from it (calls
    still in flight are sent again after the answer and are not counted),
    the ranks it knows are gone (as runs) and the newest membership event it
    heard of (``epoch``), and the token its reconfigures name it by.
    Answered with Adopted once the job is adopted.
    """

    TYPE: ClassVar[str] = "rejoin"
    job: str
    rank: int
    world_size: int
    generation: int
    version: int
    host: str
    port: int
    hostname: str
    pid: int
    heartbeat_timeout: float
    elastic: int
    min_size: int
    max_size: int
    directory_digest: str
    groups: tuple[GroupRecord, ...]
    new_group_calls: int
    checks: int
    gone: tuple[int, ...]
    epoch: int
    token: str = ""


@dataclass(frozen=True, slots=True)
class Adopted:
    """Coordinator -> each re-registered member: the job runs again under this coordinator.

    ``members`` re-registered; the others are gone (the usual notices follow).
    """

    TYPE: ClassVar[str] = "adopted"
    generation: int
    members: int
