"""Which jobs the coordinator serves, and which connection belongs to which.

The one table every part of :class:`asyncoll._rendezvous.state.RendezvousState`
looks jobs and connections up in; each part changes it only through these
calls.
"""

from __future__ import annotations

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._rendezvous.records import Job
from asyncoll._rendezvous.timeline import Timeline


class Registry:
    """The jobs by id, the connections' jobs, the connections an elastic job went on
    without, and the jobs' recent events."""

    def __init__(self) -> None:
        # The newest generation of each job id: the one that takes joins.
        self._jobs: dict[str, Job] = {}
        # Running jobs whose members began leaving while a new generation of
        # the same id formed (destroy_process_group, then init_process_group).
        self._retired: list[Job] = []
        self._conn_job: dict[int, Job] = {}
        # Connections of members an elastic job went on without: why, for their next request.
        self._excluded: dict[int, str] = {}
        #: What happened to the jobs lately, for a dashboard.
        self.timeline = Timeline()

    def newest(self, name: str) -> Job | None:
        """The generation of job ``name`` that takes joins, if any."""
        return self._jobs.get(name)

    def add(self, job: Job) -> None:
        """``job`` is now the one that takes joins for its id."""
        self._jobs[job.name] = job

    def retire(self, job: Job) -> None:
        """``job`` runs on while its members leave, and no longer takes joins."""
        self._retired.append(job)

    def live(self) -> list[Job]:
        """Every job waiting, adopting or running."""
        return [*self._jobs.values(), *self._retired]

    def forget(self, job: Job) -> None:
        """``job`` is over."""
        if self._jobs.get(job.name) is job:
            del self._jobs[job.name]
        elif job in self._retired:
            self._retired.remove(job)

    def attach(self, conn: int, job: Job) -> None:
        """Connection ``conn`` belongs to ``job`` from now on."""
        self._conn_job[conn] = job

    def detach(self, conn: int) -> None:
        """Connection ``conn`` belongs to no job any more."""
        self._conn_job.pop(conn, None)

    def job_of(self, conn: int) -> Job | None:
        """The job connection ``conn`` belongs to."""
        return self._conn_job.get(conn)

    def exclude(self, conn: int, why: str) -> None:
        """Connection ``conn``'s job went on without it: refuse its requests, saying ``why``."""
        self._conn_job.pop(conn, None)
        self._excluded[conn] = why

    def exclusion(self, conn: int) -> str | None:
        """Why connection ``conn`` is excluded from its job (None: it is not)."""
        return self._excluded.get(conn)

    def disconnect(self, conn: int) -> Job | None:
        """Connection ``conn`` closed: forget it, and return the job it belonged to."""
        self._excluded.pop(conn, None)
        return self._conn_job.pop(conn, None)

    def refuse_first(self, conn: int, version: int) -> tuple[str, str] | None:
        """Why connection ``conn``, speaking protocol ``version``, cannot join or re-register
        (None: it can)."""
        if version != PROTOCOL_VERSION:
            return ("protocol", f"the peer speaks protocol version {version} and the "
                                f"coordinator {PROTOCOL_VERSION}: run the same asyncoll "
                                "version everywhere")
        if conn in self._conn_job:
            return ("protocol", "this connection has already joined a job or re-registered")
        return None


def member_rank(job: Job | None, conn: int) -> int | None:
    """The rank of connection ``conn`` in ``job``, if ``job`` runs and it is a member."""
    if job is None or not job.running:
        return None
    return job.conn_rank.get(conn)
