"""Stragglers and stuck operations, from heartbeats, with the fake clock (issue 29)."""

from __future__ import annotations

import random

import pytest

from asyncoll._rendezvous.stragglers import LATE_US, Arrivals, Straggler
from asyncoll._wire.messages import Heartbeat, Status, StatusReply
from asyncoll.cli import straggler_lines, table

from .test_rendezvous_state import JOB, Harness

pytestmark = pytest.mark.timeout(60)


def test_the_rank_late_in_a_share_of_the_operations_is_the_straggler():
    arrivals = Arrivals()
    rng = random.Random(1)
    for seq in range(0, 800, 8):
        late = seq % 40 == 0  # every 5th sample: rank 2 comes 50 ms after the others
        for rank in (0, 1, 2):
            jitter = rng.uniform(0, 200)
            arrivals.arrived(0, seq, rank, seq * 1000 + jitter + (50_000 if late and rank == 2
                                                                    else 0), 3)
    (found,) = arrivals.stragglers()
    assert (found.group_id, found.rank, found.last, found.operations) == (0, 2, 20, 100)
    assert 49_000 < found.median_late_us < 50_100
    assert found.text() == ("rank 2 arrived last in 20 % of the last 100 sampled "
                                   "operations of group 0, a median of 50.0 ms late")


def test_jitter_or_lateness_spread_over_every_rank_is_no_straggler():
    arrivals = Arrivals()
    rng = random.Random(2)
    for seq in range(0, 1600, 8):
        slow = (seq // 8) % 3 if seq % 16 == 0 else -1  # late ones taken in turn
        for rank in range(3):
            extra = 5 * LATE_US if rank == slow else 0
            arrivals.arrived(0, seq, rank, seq * 1000 + rng.uniform(0, 300) + extra, 3)
    assert arrivals.stragglers() == []


def test_a_sample_waits_for_every_member_and_too_many_open_ones_are_dropped():
    arrivals = Arrivals()
    for seq in range(5000):
        arrivals.arrived(1, seq, 0, 0.0, 2)  # the other member never sends
    assert len(arrivals.open) == 4096 and (1, 0) not in arrivals.open
    assert arrivals.windows == {}


def beat(h: Harness, conn: int, clock_us: int, samples: tuple[int, ...] = (), **op: object
         ) -> None:
    assert h.send(conn, Heartbeat(ops=1, clock_us=clock_us, samples=samples,
                                  **op)) == []  # type: ignore[arg-type]


def test_heartbeats_samples_are_put_on_one_clock_before_they_are_compared(h: Harness):
    ranks = h.start_job(3)
    skew = {0: 0, 1: 7_000_000, 2: -3_000_000}  # the ranks' clocks are seconds apart
    for step in range(40):
        h.now = 100.0 + step
        for rank, conn in ranks.items():
            seqs = range(step * 64, step * 64 + 64, 8)
            late = {s: 30_000 if rank == 1 and s % 32 == 0 else 0 for s in seqs}
            samples = tuple(v for s in seqs for v in (0, s, int(h.now * 1e6) - 900_000 + s +
                                                        late[s] + skew[rank]))
            beat(h, conn, int(h.now * 1e6) + skew[rank] - 50, samples)
    reply = h.state.status(JOB, h.now)
    (job,) = reply.jobs
    (found,) = job.stragglers
    assert (found.group_id, found.rank, found.last, found.operations) == (0, 1, 80, 320)
    assert found.median_late_s == pytest.approx(0.03, abs=0.001)
    assert straggler_lines(reply.jobs) == (f"job {JOB}: rank 1 arrived last in 25 % of the last "
                                           "320 sampled operations of group 0, a median of "
                                           "30.0 ms late")


def test_a_job_without_samples_has_no_straggler(h: Harness):
    h.start_job(2)
    assert straggler_lines(h.state.status(JOB, h.now).jobs) == f"job {JOB}: no straggler"


def test_status_names_the_rank_the_others_wait_on(h: Harness):
    ranks = h.start_job(4)
    h.now = 50.0
    for rank, conn in ranks.items():
        if rank == 2:  # done with #812 (it skipped one), while the others wait in #813
            beat(h, conn, 1_000_000_000, group_id=0, seq=812, collective="all_reduce",
                 running=0, age_us=14_500_000)
        else:
            beat(h, conn, 1_000_000_000, group_id=0, seq=813, collective="all_reduce",
                 running=1, age_us=14_000_000)
    reply = h.state.handle(99, 1, Status(job=JOB), h.now)[0].message
    assert isinstance(reply, StatusReply)
    (job,) = reply.jobs
    assert job.stuck == ("rank 2 is at all_reduce #812 of group 0; ranks 0, 1, 3 wait in #813 "
                         "for 14 s",)
    assert [m.operation for m in job.members] == [
        "all_reduce #813 of group 0, running for 14 s"] * 2 + [
        "all_reduce #812 of group 0, done, started 14 s ago",
        "all_reduce #813 of group 0, running for 14 s"]
    assert table(reply.jobs).splitlines()[-1] == (
        f"! job {JOB}: rank 2 is at all_reduce #812 of group 0; ranks 0, 1, 3 wait in #813 "
        "for 14 s")
    h.now = 52.0  # a few seconds waiting are not worth a line
    for conn in ranks.values():
        beat(h, conn, 1_000_000_000, group_id=0, seq=900, collective="broadcast", running=1,
             age_us=1_000_000)
    assert h.state.status(JOB, h.now).jobs[0].stuck == ()


def test_a_straggler_is_the_same_as_its_words():
    assert Straggler(3, 7, 78, 100, 12_000).text() == (
        "rank 7 arrived last in 78 % of the last 100 sampled operations of group 3, a median "
        "of 12.0 ms late")


@pytest.fixture
def h() -> Harness:
    return Harness()
