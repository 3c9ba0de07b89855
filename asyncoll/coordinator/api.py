"""The coordinator's facts as JSON, for its dashboard and for tools: ``/api/...``.

``/api/jobs`` lists the jobs; ``/api/jobs/<job>`` shows one, a page of its
members at a time (``?offset=&limit=``); ``/api/events?since=<id>`` gives
the events after the last one seen. Every answer is bounded in size, so a
job of 4096 members costs a page, not a table. Read in the coordinator's
event loop, from its state, and never changing it.

A job's ops per second is its median live member's (heartbeats.job_rate):
collectives per second of the job, not a sum over its ranks. The histories
are sampled by :class:`History`, every :data:`SAMPLE_EVERY_S`, only while an
HTTP server runs.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from asyncoll._rendezvous.heartbeats import job_rate, stuck
from asyncoll._rendezvous.job_status import operation_words
from asyncoll._rendezvous.records import Job
from asyncoll._rendezvous.state import RendezvousState

#: How often the histories take a sample, in seconds.
SAMPLE_EVERY_S = 2.0
#: Samples kept per job (ten minutes) and per member (two minutes).
JOB_SAMPLES = 300
MEMBER_SAMPLES = 60
#: The most jobs /api/jobs lists, members a page holds, events an answer holds,
#: and lines of the hang view and stragglers.
MAX_JOBS = 200
DEFAULT_PAGE = 100
MAX_PAGE = 500
MAX_EVENTS = 200
MAX_LINES = 50


class History:
    """Each running job's ops per second and live members, and each live member's ops per
    second, over the last minutes."""

    def __init__(self) -> None:
        self.jobs: dict[str, collections.deque[tuple[float, float, int]]] = {}
        self.members: dict[tuple[str, int], collections.deque[float]] = {}

    def sample(self, state: RendezvousState, now: float) -> None:
        """Take one sample of every running job (at ``now``); forget the jobs gone."""
        running = {job.name: job for job in state.jobs() if job.running}
        for name in self.jobs.keys() - running.keys():
            del self.jobs[name]
        self.members = {key: rates for key, rates in self.members.items()
                        if key[0] in running}
        for name, job in running.items():
            live = job.live()
            rates = [job.members[r].ops_rate for r in live]
            self.jobs.setdefault(name, collections.deque(maxlen=JOB_SAMPLES)).append(
                (now, round(job_rate(rates), 3), len(live)))
            for rank, rate in zip(live, rates):
                self.members.setdefault((name, rank), collections.deque(
                    maxlen=MEMBER_SAMPLES)).append(round(rate, 3))


def jobs_view(state: RendezvousState, now: float, address: str, uptime_s: float
              ) -> dict[str, Any]:
    """``/api/jobs``: the coordinator, and a line of facts per job (the first MAX_JOBS)."""
    jobs = sorted(state.jobs(), key=lambda j: j.name)
    return {"coordinator": {"address": address, "uptime_s": round(uptime_s, 1)},
            "jobs": [_summary(job, now) for job in jobs[:MAX_JOBS]],
            "more": max(len(jobs) - MAX_JOBS, 0)}


def job_view(state: RendezvousState, history: History, name: str, offset: int, limit: int,
             now: float) -> dict[str, Any] | None:
    """``/api/jobs/<name>``: one job, with members ``offset`` to ``offset + limit``; None if
    no such job is live."""
    job = next((j for j in state.jobs() if j.name == name), None)
    if job is None:
        return None
    limit = min(max(limit, 1), MAX_PAGE)
    offset = max(offset, 0)
    rows = _member_rows(job)
    states = collections.Counter(row[1] for row in rows)
    page = [_member(job, history, rank, member_state, info, now)
            for rank, member_state, info in rows[offset:offset + limit]]
    lines = stuck(job, now) if job.running else []
    return {**_summary(job, now, lines), "elastic": int(job.elastic),
            "history": [[round(now - t, 1), rate, live]
                        for t, rate, live in history.jobs.get(name, ())],
            "states": {s: states.get(s, 0) for s in
                       ("running", "left", "pending", "waiting", "adopting")},
            "members": {"total": len(rows), "offset": offset, "limit": limit,
                        "items": page},
            "stuck": lines[:MAX_LINES],
            "stragglers": [{"group_id": s.group_id, "rank": s.rank, "last": s.last,
                            "operations": s.operations,
                            "median_late_s": round(s.median_late_us / 1e6, 6)}
                           for s in job.arrivals.stragglers()[:MAX_LINES]]}


def events_view(state: RendezvousState, since: int | None, now: float) -> dict[str, Any]:
    """``/api/events?since=<id>``: up to MAX_EVENTS events after ``since`` (None: the newest
    MAX_EVENTS), with wall-clock times."""
    wall = time.time() - now  # the state's clock to the wall clock's
    if since is None:
        since = state.timeline.next_id - 1 - MAX_EVENTS
    events = state.timeline.since(since, MAX_EVENTS)
    return {"events": [{"id": e.id, "time": round(wall + e.time, 3), "job": e.job,
                        "kind": e.kind, "text": e.text} for e in events],
            "next": events[-1].id if events else min(since, state.timeline.next_id - 1)}


def _summary(job: Job, now: float, lines: list[str] | None = None) -> dict[str, Any]:
    """A job's line of facts; ``lines``: its hang view's, when already made."""
    if lines is None:
        lines = stuck(job, now) if job.running else []
    state = "running" if job.running else "adopting" if job.adopting else "waiting"
    live = job.live() if job.running else []
    hosts = {job.members[r].info.hostname for r in live} if job.running else {
        w.join.hostname for w in job.waiting.values()}
    return {"job": job.name, "state": state, "generation": job.generation,
            "world_size": job.world_size, "live": len(live), "pending": len(job.pending),
            "left": len(job.departed) if job.running else 0, "hosts": len(hosts),
            "age_s": round(now - job.started, 1),
            "ops_per_s": round(job_rate([job.members[r].ops_rate for r in live]), 3),
            "stuck": len(lines),
            "stragglers": len(job.arrivals.stragglers())}


def _member_rows(job: Job) -> list[tuple[int, str, Any]]:
    """(rank, state, the member or its waiting join) of every process, in rank order."""
    if job.adopting:
        return [(r, "adopting", e.member) for r, e in sorted(job.rejoins.items())]
    if not job.running:
        return [(w.join.rank, "waiting", w) for w in
                sorted(job.waiting.values(), key=lambda w: w.order)]
    return [(r, "left" if r in job.departed else "running", m)
            for r, m in sorted(job.members.items())] + [
        (-1, "pending", w) for w in sorted(job.pending.values(), key=lambda w: w.order)]


def _member(job: Job, history: History, rank: int, member_state: str, info: Any,
            now: float) -> dict[str, Any]:
    if member_state in ("waiting", "pending"):
        join = info.join
        return {"rank": rank, "host": join.host, "hostname": join.hostname, "pid": join.pid,
                "state": member_state, "ops": -1, "ops_per_s": 0.0, "heartbeat_age_s": -1.0,
                "operation": "", "history": []}
    beat = info.last_heartbeat
    return {"rank": rank, "host": info.info.host, "hostname": info.info.hostname,
            "pid": info.pid, "state": member_state, "ops": info.ops,
            "ops_per_s": round(info.ops_rate, 3),
            "heartbeat_age_s": -1.0 if beat is None else round(now - beat, 1),
            "operation": operation_words(info, now),
            "history": list(history.members.get((job.name, rank), ()))}
