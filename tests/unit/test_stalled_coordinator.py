"""A coordinator that did not run for a while judges nobody before it has read (issue 56).

The state machine with a fake clock that ticks every 0.1 s, as the daemon's
does, and then jumps: the daemon was stopped, swapped out or paused. See
asyncoll._rendezvous.stalls for the rule.
"""

from __future__ import annotations

import logging

import pytest

from asyncoll._rendezvous.state import STALL_AFTER_S, Reply
from asyncoll._wire.messages import Barrier, Error, Heartbeat, MemberGone, Ok

from .test_adoption_state import GRACE, send_all
from .test_rendezvous_state import Harness, by_conn, notices

pytestmark = pytest.mark.timeout(60)

#: The daemon's tick period (asyncoll._defaults.COORDINATOR_TICK_S).
TICK_S = 0.1
DEADLINE_S = 2.0
#: Members beat every quarter of their deadline.
BEAT_EVERY_S = DEADLINE_S / 4
#: Three deadlines: long enough that every member looks silent on the late tick.
PAUSE_S = 3 * DEADLINE_S


@pytest.fixture
def h() -> Harness:
    """Three members (connections 1-3, ranks 0-2) of a job with a 2 s heartbeat deadline."""
    h = Harness(stall_after_s=STALL_AFTER_S)
    for conn in (1, 2, 3):
        h.join(conn, rank=conn - 1, world_size=3, heartbeat_timeout=DEADLINE_S)
    return h


def run(h: Harness, until: float, beating: tuple[int, ...],
        step: float = TICK_S) -> list[tuple[float, Reply]]:
    """Tick every ``step`` s up to ``until``, connections ``beating`` sending their
    heartbeats meanwhile; every reply, with the time of the tick that sent it."""
    sent: list[tuple[float, Reply]] = []
    start, beats = h.now, 0
    for i in range(1, round((until - start) / step) + 1):
        h.now = start + i * step
        if h.now >= start + (beats + 1) * BEAT_EVERY_S:
            beats += 1
            for conn in beating:
                h.send(conn, Heartbeat(ops=beats))
        sent += [(h.now, reply) for reply in h.tick(h.now)]
    return sent


def losses(sent: list[tuple[float, Reply]]) -> list[tuple[float, int, MemberGone]]:
    """(when, to which connection, the notice) of every loss told."""
    return [(when, r.conn, r.message) for when, r in sent if isinstance(r.message, MemberGone)]


def resume(h: Harness, queued: tuple[int, ...]) -> None:
    """The daemon ran again after PAUSE_S: its late tick, then the heartbeats that
    ``queued`` sent meanwhile, read from its connections."""
    assert h.tick(h.now + PAUSE_S) == [], "the late tick decided something"
    for conn in queued:
        h.send(conn, Heartbeat(ops=100))


def test_after_a_pause_of_three_deadlines_no_member_with_heartbeats_queued_is_lost(
        h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "asyncoll.coordinator")
    assert run(h, 1.0, beating=(1, 2, 3)) == []

    resume(h, queued=(1, 2, 3))
    after = run(h, h.now + 5 * DEADLINE_S, beating=(1, 2, 3))

    assert after == []
    assert h.state.tally.stalls == 1
    assert "the coordinator did not run for 6.0 s" in caplog.text
    status = h.state.status("", h.now).jobs[0]
    assert [m.state for m in status.members] == ["running"] * 3


@pytest.mark.parametrize("beat_before_freezing", [True, False], ids=["queued", "silent"])
def test_a_member_frozen_during_the_pause_is_lost_within_a_deadline_of_the_resume(
        h: Harness, beat_before_freezing: bool) -> None:
    # Connection 2 (rank 1) froze during the pause: after one heartbeat that was
    # queued, or before the pause. Its connection stays open.
    run(h, 1.0, beating=(1, 2, 3))
    resume(h, queued=(1, 2, 3) if beat_before_freezing else (1, 3))
    resumed_at = h.now

    told = losses(run(h, resumed_at + DEADLINE_S + 2 * TICK_S, beating=(1, 3)))

    assert {(conn, gone.rank) for _, conn, gone in told} == {(1, 1), (3, 1)}
    when = {when for when, _, _ in told}.pop()
    assert when <= resumed_at + DEADLINE_S + TICK_S + 1e-9, when - resumed_at
    # Silent since its last heartbeat read: at the resume, or 1.0 (before the pause).
    silent = when - (resumed_at if beat_before_freezing else 1.0)
    assert told[0][2].reason == f"no heartbeat for {silent:.1f} s (the job allows 2 s)"


def test_a_member_that_died_during_the_pause_is_lost_when_its_closed_connection_is_read(
        h: Harness) -> None:
    run(h, 1.0, beating=(1, 2, 3))
    resume(h, queued=(1, 3))

    told = notices(h.disconnect(2))

    assert {conn: [(m.rank, m.how, m.reason) for m in ms] for conn, ms in told.items()} == {
        1: [(1, "lost", "disconnected without leaving")],
        3: [(1, "lost", "disconnected without leaving")]}


def test_a_loaded_daemon_late_on_every_tick_still_finds_a_frozen_member(h: Harness) -> None:
    # Ticks 0.6 s apart: every other one decides nothing, the ones between decide.
    told = losses(run(h, 3 * DEADLINE_S, beating=(1, 3), step=STALL_AFTER_S + 0.1))

    assert {(conn, gone.rank) for _, conn, gone in told} == {(1, 1), (3, 1)}
    assert {when for when, _, _ in told}.pop() <= DEADLINE_S + 2 * (STALL_AFTER_S + 0.1)
    assert h.state.tally.stalls >= 2


def test_a_barrier_whose_last_arrival_was_queued_during_the_pause_completes(
        h: Harness) -> None:
    run(h, 1.0, beating=(1, 2, 3))
    h.send(1, Barrier(group_id=0, seq=0, timeout=3.0))
    h.send(2, Barrier(group_id=0, seq=0, timeout=3.0))

    resume(h, queued=(1, 2))  # past the barrier's deadline
    replies = h.send(3, Barrier(group_id=0, seq=0, timeout=3.0))  # sent before it

    assert {conn: r.message for conn, r in by_conn(replies).items()} == {
        1: Ok(), 2: Ok(), 3: Ok()}


def test_each_way_of_being_lost_says_was_lost_once(caplog: pytest.LogCaptureFixture) -> None:
    # The notice carries why; the daemon's line and the members' errors (asyncoll.
    # _runtime.session: "rank 1 on host H (A) was lost: <why> ...") say "was lost: ".
    caplog.set_level(logging.INFO, "asyncoll.coordinator")
    silent, closed, adopting = Harness(), Harness(), Harness()
    for h in (silent, closed):
        for conn in (1, 2, 3):
            h.join(conn, rank=conn - 1, world_size=3, heartbeat_timeout=10.0)
    silent.tick(4.0)
    silent.send(1, Heartbeat(ops=5))
    silent.send(3, Heartbeat(ops=5))
    send_all(adopting, [0, 1, 2])  # rank 3 never re-registers

    told = {"silent": notices(silent.tick(11.0))[1][0],
            "closed": notices(closed.disconnect(2))[1][0],
            "adopting": notices(adopting.tick(GRACE))[101][0]}

    reasons = {how: (gone.how, gone.reason) for how, gone in told.items()
               if isinstance(gone, MemberGone)}
    assert reasons == {
        "silent": ("lost", "no heartbeat for 11.0 s (the job allows 10 s)"),
        "closed": ("lost", "disconnected without leaving"),
        "adopting": ("lost", f"it did not re-register with the restarted coordinator "
                             f"within {GRACE:g} s")}
    lines = [r.getMessage() for r in caplog.records if "was lost" in r.getMessage()]
    assert len(lines) == 3 and all(line.count("was lost") == 1 for line in lines), lines
    assert ("job 'job-1': rank 1 on node-a (pid 1002) was lost: no heartbeat for 11.0 s "
            "(the job allows 10 s); 2 of 3 ranks remain") in lines
    assert ("job 'job-1': rank 1 on node-a (pid 1002) was lost: disconnected without "
            "leaving; 2 of 3 ranks remain") in lines


def test_a_gathering_broken_by_a_loss_says_was_lost_once(h: Harness) -> None:
    h.send(1, Barrier(group_id=0, seq=0, timeout=30.0))

    failed = by_conn(h.disconnect(2))[1].message

    assert isinstance(failed, Error) and failed.code == "peer_lost"
    assert failed.message == ("barrier #0 of group 0 in job 'job-1' cannot complete: rank 1 "
                              "on node-a was lost: disconnected without leaving before "
                              "calling it")
