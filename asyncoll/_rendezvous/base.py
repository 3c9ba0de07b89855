"""The bookkeeping that every part of the coordinator's state machine shares.

:class:`StateBase` holds the jobs and which connection belongs to which; the
parts of :class:`asyncoll._rendezvous.state.RendezvousState` (joins,
agreements, elastic membership, departures) build on it.
"""

from __future__ import annotations

import logging

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._rendezvous.directory import PORTS_IN_WELCOME_UP_TO, Directory
from asyncoll._rendezvous.tally import Tally
from asyncoll._rendezvous.records import MEMBER_LINES_UP_TO, Job, Reply
from asyncoll._wire.messages import Ok

log = logging.getLogger("asyncoll.coordinator")


class StateBase:
    """The coordinator's jobs and connections, and the bookkeeping every handler needs."""

    def __init__(self, ports_in_welcome_up_to: int = PORTS_IN_WELCOME_UP_TO) -> None:
        #: The largest membership whose Welcome lists every rank's port.
        self.ports_in_welcome_up_to = ports_in_welcome_up_to
        # The newest generation of each job id: the one that takes joins.
        self._jobs: dict[str, Job] = {}
        # Running jobs whose members began leaving while a new generation of
        # the same id formed (destroy_process_group, then init_process_group).
        self._retired: list[Job] = []
        self._conn_job: dict[int, Job] = {}
        # Connections of members an elastic job went on without: why, for their next request.
        self._excluded: dict[int, str] = {}
        self._joins = 0
        #: What the daemon's metrics report.
        self.tally = Tally()

    @staticmethod
    def _answer_leaves(job: Job) -> list[Reply]:
        ok = Ok()
        replies = [Reply(conn, leave, ok) for _, conn, leave, _ in job.unannounced]
        job.unannounced.clear()
        return replies

    def _live(self) -> list[Job]:
        return [*self._jobs.values(), *self._retired]

    def _forget(self, job: Job) -> None:
        if self._jobs.get(job.name) is job:
            del self._jobs[job.name]
        elif job in self._retired:
            self._retired.remove(job)

    def _directory(self, job: Job) -> Directory:
        """The directory of ``job``'s membership now, for its Welcomes."""
        return Directory([job.members[r] for r in range(job.world_size)], job.generation,
                         self.ports_in_welcome_up_to)

    @staticmethod
    def _member_rank(job: Job | None, conn: int) -> int | None:
        if job is None or not job.running:
            return None
        return job.conn_rank.get(conn)


def version_refusal(version: int) -> tuple[str, str] | None:
    """Why a peer of protocol ``version`` is refused (None: it speaks this one)."""
    if version == PROTOCOL_VERSION:
        return None
    return ("protocol", f"the peer speaks protocol version {version} and the coordinator "
                        f"{PROTOCOL_VERSION}: run the same asyncoll version everywhere")


def member_level(job: Job) -> int:
    """The level of a line about one member: debug in a job too large to log each."""
    return logging.INFO if job.world_size <= MEMBER_LINES_UP_TO else logging.DEBUG

