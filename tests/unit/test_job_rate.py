"""A job's operations per second: collectives of the job, not a sum over its ranks."""

from __future__ import annotations

import pytest

from asyncoll._rendezvous.heartbeats import job_rate
from asyncoll._wire.messages import Heartbeat
from asyncoll.coordinator.api import History, job_view, jobs_view
from tests.unit.test_rendezvous_state import JOB, Harness

pytestmark = pytest.mark.timeout(30)


def _three_ranks_at(rates: list[float]) -> Harness:
    """A running job of three ranks, each heard twice, 2 s apart, at ``rates`` ops/s."""
    h = Harness()
    conns = h.start_job(3)
    for conn in conns.values():
        h.send(conn, Heartbeat(ops=0))
    h.now = 2.0
    for rank, conn in conns.items():
        h.send(conn, Heartbeat(ops=int(2 * rates[rank])))
    return h


def test_three_ranks_at_ten_per_second_make_a_job_of_ten_per_second() -> None:
    h = _three_ranks_at([10.0, 10.0, 10.0])
    history = History()
    history.sample(h.state, h.now)

    (line,) = jobs_view(h.state, h.now, "127.0.0.1:1", 1.0)["jobs"]
    one = job_view(h.state, history, JOB, 0, 10, h.now)

    assert line["ops_per_s"] == 10.0
    assert one is not None and one["ops_per_s"] == 10.0
    assert [rate for _, rate, _ in one["history"]] == [10.0]
    assert [m["ops_per_s"] for m in one["members"]["items"]] == [10.0, 10.0, 10.0]


def test_a_job_runs_at_its_median_ranks_rate() -> None:
    assert job_rate([10.0, 2.0, 12.0]) == 10.0
    assert job_rate([10.0, 12.0]) == 11.0
    assert job_rate([]) == 0.0
