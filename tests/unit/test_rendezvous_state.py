"""The coordinator's state machine, driven request by request with a fake clock."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncoll._rendezvous.state import RendezvousState, Reply
from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._wire.messages import (
    Barrier,
    Error,
    GroupCreated,
    Heartbeat,
    Join,
    Leave,
    MemberGone,
    MembersLeft,
    Message,
    NewGroup,
    Ok,
    PeerInfo,
    Welcome,
)

pytestmark = pytest.mark.timeout(60)

JOB = "job-1"


def make_join(conn: int, *, rank: int = -1, world_size: int = 2, hostname: str = "node-a",
              job: str = JOB, version: int = PROTOCOL_VERSION, timeout: float = 30.0,
              heartbeat_timeout: float = 1e9) -> Join:
    """A join whose data address and pid are derived from the connection number.

    Heartbeats never expire unless a test asks (the fake clock jumps far ahead).
    """
    return Join(job=job, rank=rank, world_size=world_size, host=f"10.0.0.{conn}",
                port=40000 + conn, hostname=hostname, pid=1000 + conn, version=version,
                timeout=timeout, heartbeat_timeout=heartbeat_timeout)


def by_conn(replies: Sequence[Reply]) -> dict[int, Reply]:
    """Replies to requests keyed by connection; at most one per connection.

    Notices (request id 0: a member gone) are left out; notices() has them.
    """
    replies = [r for r in replies if r.request_id != 0]
    result = {r.conn: r for r in replies}
    assert len(result) == len(replies), f"several replies to one connection: {replies}"
    return result


def notices(replies: Sequence[Reply]) -> dict[int, list[Message]]:
    """The notices (request id 0) sent, by connection."""
    result: dict[int, list[Message]] = {}
    for reply in replies:
        if reply.request_id == 0:
            result.setdefault(reply.conn, []).append(reply.message)
    return result


def errors(replies: Sequence[Reply]) -> dict[int, Error]:
    result = {}
    for conn, reply in by_conn(replies).items():
        assert isinstance(reply.message, Error), reply
        result[conn] = reply.message
    return result


class Harness:
    """A RendezvousState, a fake clock, and a request id per request.

    The clock jumps between ticks, as a daemon's does not: a jump is time that
    passed while the daemon ran, not a pause of it, unless a test gives
    ``stall_after_s`` (asyncoll._rendezvous.stalls).
    """

    def __init__(self, stall_after_s: float = math.inf) -> None:
        self.state = RendezvousState(stall_after_s=stall_after_s)
        self.now = 0.0
        self._ids = itertools.count(100)
        self.last_id: dict[int, int] = {}

    def send(self, conn: int, message: Message) -> list[Reply]:
        request_id = next(self._ids)
        self.last_id[conn] = request_id
        return self.state.handle(conn, request_id, message, self.now)

    def join(self, conn: int, **kwargs: object) -> list[Reply]:
        return self.send(conn, make_join(conn, **kwargs))  # type: ignore[arg-type]

    def tick(self, now: float) -> list[Reply]:
        self.now = now
        return self.state.tick(now)

    def disconnect(self, conn: int) -> list[Reply]:
        return self.state.disconnect(conn, self.now)

    def start_job(self, world_size: int, job: str = JOB) -> dict[int, int]:
        """Join connections 1..world_size and return {rank: conn}."""
        replies: list[Reply] = []
        for conn in range(1, world_size + 1):
            replies = self.join(conn, rank=conn - 1, world_size=world_size, job=job)
        welcomes = by_conn(replies)
        assert len(welcomes) == world_size
        return {reply.message.rank: conn  # type: ignore[union-attr]
                for conn, reply in welcomes.items()}


@pytest.fixture
def h() -> Harness:
    return Harness()


def welcomes(replies: Sequence[Reply]) -> dict[int, Welcome]:
    result = {}
    for conn, reply in by_conn(replies).items():
        assert isinstance(reply.message, Welcome), reply
        result[conn] = reply.message
    return result


# -- rendezvous ------------------------------------------------------------------------


def test_rendezvous_waits_for_the_whole_world_then_welcomes_everyone(h: Harness) -> None:
    assert h.join(1, world_size=3) == []
    assert h.join(2, world_size=3) == []
    assert h.state.job_is_active(JOB)

    replies = h.join(3, world_size=3)

    got = welcomes(replies)
    assert set(got) == {1, 2, 3}
    assert {r.request_id for r in replies} == {h.last_id[1], h.last_id[2], h.last_id[3]}
    for reply in replies:
        assert reply.request_id == h.last_id[reply.conn]
    assert sorted(w.rank for w in got.values()) == [0, 1, 2]
    directory = got[1].peers
    assert all(w.peers == directory and w.world_size == 3 for w in got.values())
    assert [p.rank for p in directory] == [0, 1, 2]
    for conn, welcome in got.items():
        assert directory[welcome.rank] == PeerInfo(welcome.rank, f"10.0.0.{conn}",
                                                   40000 + conn, "node-a")


def test_world_of_one_completes_at_its_first_join(h: Harness) -> None:
    got = welcomes(h.join(1, world_size=1))

    assert got[1].rank == 0
    assert got[1].world_size == 1


def test_requested_ranks_are_honoured_and_the_rest_assigned_in_join_order(h: Harness) -> None:
    h.join(1, rank=2, world_size=4)
    h.join(2, world_size=4)
    h.join(3, rank=0, world_size=4)

    got = welcomes(h.join(4, world_size=4))

    assert {conn: w.rank for conn, w in got.items()} == {1: 2, 2: 1, 3: 0, 4: 3}


def test_unrequested_ranks_keep_same_host_peers_adjacent(h: Harness) -> None:
    for conn, host in enumerate(["b", "a", "b", "a"], start=1):
        replies = h.join(conn, world_size=4, hostname=host)

    got = welcomes(replies)
    ranks_of = {host: sorted(w.rank for c, w in got.items()
                             if w.peers[w.rank].hostname == host) for host in "ab"}
    assert sorted(ranks_of["a"] + ranks_of["b"]) == [0, 1, 2, 3]
    for ranks in ranks_of.values():
        assert ranks == list(range(ranks[0], ranks[0] + 2))


@given(hosts=st.lists(st.sampled_from("abcd"), min_size=1, max_size=12))
def test_every_host_gets_a_contiguous_block_of_ranks(hosts: list[str]) -> None:
    h = Harness()
    for conn, host in enumerate(hosts, start=1):
        replies = h.join(conn, world_size=len(hosts), hostname=host)

    got = welcomes(replies)
    directory = got[1].peers
    assert sorted(w.rank for w in got.values()) == list(range(len(hosts)))
    for conn, welcome in got.items():
        assert directory[welcome.rank].hostname == hosts[conn - 1]
    for host in set(hosts):
        ranks = [p.rank for p in directory if p.hostname == host]
        assert ranks == list(range(ranks[0], ranks[0] + len(ranks)))


def test_duplicate_requested_rank_is_refused_naming_the_peer_that_holds_it(h: Harness
                                                                           ) -> None:
    assert h.join(1, rank=0, world_size=2) == []

    refused = errors(h.join(2, rank=0, world_size=2, hostname="node-b"))

    assert refused[2].code == "configuration"
    assert "rank 0 is already taken" in refused[2].message
    assert "pid 1001" in refused[2].message and "node-a" in refused[2].message


def test_refused_peer_may_join_again_on_the_same_connection(h: Harness) -> None:
    h.join(1, rank=0, world_size=2, job="other")
    errors(h.join(2, rank=0, world_size=2, job="other"))

    h.join(3, rank=0, world_size=2)
    got = welcomes(h.join(2, rank=1, world_size=2))

    assert {conn: w.rank for conn, w in got.items()} == {3: 0, 2: 1}


@pytest.mark.parametrize("rank", [4, 5, -2])
def test_out_of_range_requested_rank_is_refused(h: Harness, rank: int) -> None:
    refused = errors(h.join(1, rank=rank, world_size=4))

    assert refused[1].code == "configuration"
    assert f"requested rank {rank} is out of range" in refused[1].message
    assert "0 to 3" in refused[1].message
    assert not h.state.job_is_active(JOB)


def test_world_size_below_one_is_refused(h: Harness) -> None:
    refused = errors(h.join(1, world_size=0))

    assert refused[1].code == "configuration"
    assert "world size" in refused[1].message


def test_empty_job_id_is_refused(h: Harness) -> None:
    refused = errors(h.join(1, world_size=1, job=""))

    assert refused[1].code == "configuration"
    assert "job id" in refused[1].message


def test_world_size_disagreement_is_refused_to_the_latecomer_and_ends_the_rendezvous(
        h: Harness) -> None:
    h.join(1, world_size=2)

    refused = errors(h.join(2, world_size=3))

    assert refused[2].code == "configuration"
    assert "world size 3 disagrees with the world size 2" in refused[2].message
    assert refused[1].code == "rendezvous"  # more in test_rendezvous_refusals.py


@pytest.mark.parametrize("version", [0, PROTOCOL_VERSION + 1])
def test_protocol_version_mismatch_is_refused(h: Harness, version: int) -> None:
    refused = errors(h.join(1, world_size=1, version=version))

    assert refused[1].code == "protocol"
    assert f"protocol version {version}" in refused[1].message
    assert str(PROTOCOL_VERSION) in refused[1].message
    assert not h.state.job_is_active(JOB)


def test_joining_a_running_job_is_refused(h: Harness) -> None:
    h.start_job(2)

    refused = errors(h.join(9, world_size=2))

    assert refused[9].code == "rendezvous"
    assert "already running" in refused[9].message


def test_join_after_a_member_left_starts_the_next_generation_of_the_job(h: Harness) -> None:
    # destroy_process_group then init_process_group in the same processes: rank 0
    # is back before rank 1 has left the first run.
    ranks = h.start_job(2)
    h.send(ranks[0], Leave())
    assert h.join(11, rank=0, world_size=2) == []
    assert h.state.job_is_active(JOB)

    barrier = errors(h.send(ranks[1], Barrier(group_id=0, seq=1, timeout=5.0)))
    assert barrier[ranks[1]].code == "peer_lost"  # the old run is still served
    assert [r.message for r in h.send(ranks[1], Leave())] == [Ok()]
    replies = h.join(12, rank=1, world_size=2)

    assert sorted(w.rank for w in welcomes(replies).values()) == [0, 1]
    assert h.state.job_names() == [JOB]


def test_second_join_on_one_connection_is_a_protocol_error(h: Harness) -> None:
    h.join(1, world_size=2)

    refused = errors(h.join(1, world_size=2))

    assert refused[1].code == "protocol"


def test_jobs_with_different_ids_rendezvous_independently(h: Harness) -> None:
    h.join(1, world_size=2, job="a")
    h.join(2, world_size=2, job="b")

    assert h.state.job_names() == ["a", "b"]
    assert set(welcomes(h.join(3, world_size=2, job="a"))) == {1, 3}
    assert set(welcomes(h.join(4, world_size=2, job="b"))) == {2, 4}


def test_rendezvous_timeout_fails_every_waiting_peer_naming_present_and_missing(
        h: Harness) -> None:
    h.join(1, rank=2, world_size=5, timeout=10.0)
    h.now = 1.0
    h.join(2, rank=0, world_size=5, timeout=10.0)
    h.join(3, world_size=5, timeout=10.0)

    assert h.tick(9.9) == []
    failed = errors(h.tick(10.0))

    assert set(failed) == {1, 2, 3}
    assert all(error.code == "rendezvous_timeout" for error in failed.values())
    message = failed[1].message
    assert "ranks 0, 2 present" in message
    assert "1 peer(s) without a requested rank" in message
    assert "3 of 5 peers joined" in message
    assert "2 missing" in message
    assert "10.0 s" in message
    assert not h.state.job_is_active(JOB)
    assert h.tick(20.0) == []


def test_rendezvous_timeout_replies_to_each_join_request(h: Harness) -> None:
    h.join(1, world_size=3, timeout=5.0)
    h.join(2, world_size=3, timeout=5.0)

    replies = h.tick(5.0)

    assert {(r.conn, r.request_id) for r in replies} == {(1, h.last_id[1]), (2, h.last_id[2])}


def test_rendezvous_deadline_counts_from_the_first_join(h: Harness) -> None:
    h.join(1, world_size=3, timeout=10.0)
    h.now = 8.0
    h.join(2, world_size=3, timeout=10.0)

    assert set(errors(h.tick(10.0))) == {1, 2}


def test_job_can_rendezvous_again_after_a_timeout(h: Harness) -> None:
    h.join(1, world_size=2, timeout=1.0)
    h.tick(1.0)

    h.join(1, world_size=2)
    got = welcomes(h.join(2, world_size=2))

    assert set(got) == {1, 2}


def test_disconnect_during_rendezvous_removes_the_waiter(h: Harness) -> None:
    h.join(1, rank=0, world_size=3)
    h.join(2, world_size=3)

    assert h.disconnect(1) == []
    assert h.join(3, rank=0, world_size=3) == []  # rank 0 is free again; 2 of 3 present
    got = welcomes(h.join(4, world_size=3))

    assert {conn: w.rank for conn, w in got.items()} == {2: 1, 3: 0, 4: 2}


def test_disconnected_waiter_gets_no_welcome(h: Harness) -> None:
    h.join(1, world_size=2)
    h.disconnect(1)
    assert h.join(2, world_size=2) == []

    got = welcomes(h.join(3, world_size=2))

    assert set(got) == {2, 3}


def test_job_is_forgotten_when_its_last_waiter_disconnects(h: Harness) -> None:
    h.join(1, world_size=2)

    h.disconnect(1)

    assert not h.state.job_is_active(JOB)
    assert h.state.job_names() == []
    assert h.tick(1000.0) == []


def test_disconnect_of_an_unknown_connection_is_ignored(h: Harness) -> None:
    assert h.disconnect(42) == []


# -- requests that need a completed join ------------------------------------------------


@pytest.mark.parametrize("message", [NewGroup.of(ranks=(0,), timeout=1.0),
                                     Barrier(group_id=0, seq=0, timeout=1.0), Leave()],
                         ids=["new_group", "barrier", "leave"])
def test_request_before_join_is_a_protocol_error(h: Harness, message: Message) -> None:
    refused = errors(h.send(1, message))

    assert refused[1].code == "protocol"
    assert "join" in refused[1].message


@pytest.mark.parametrize("message", [NewGroup.of(ranks=(0,), timeout=1.0),
                                     Barrier(group_id=0, seq=0, timeout=1.0), Leave()],
                         ids=["new_group", "barrier", "leave"])
def test_request_while_rendezvous_is_incomplete_is_a_protocol_error(
        h: Harness, message: Message) -> None:
    h.join(1, world_size=2)

    refused = errors(h.send(1, message))

    assert refused[1].code == "protocol"


@pytest.mark.parametrize("message", [Ok(), Error(code="x", message="y"),
                                     GroupCreated.of(group_id=1, ranks=(0,))],
                         ids=["ok", "error", "group_created"])
def test_coordinator_refuses_messages_only_it_sends(h: Harness, message: Message) -> None:
    ranks = h.start_job(1)

    refused = errors(h.send(ranks[0], message))

    assert refused[ranks[0]].code == "protocol"


# -- new_group ------------------------------------------------------------------------


def test_new_group_completes_when_every_rank_agrees(h: Harness) -> None:
    ranks = h.start_job(3)

    assert h.send(ranks[0], NewGroup.of(ranks=(0, 2), timeout=5.0)) == []
    assert h.send(ranks[1], NewGroup.of(ranks=(0, 2), timeout=5.0)) == []
    replies = h.send(ranks[2], NewGroup.of(ranks=(0, 2), timeout=5.0))

    got = by_conn(replies)
    assert set(got) == set(ranks.values())
    for conn, reply in got.items():
        assert reply.message == GroupCreated.of(group_id=1, ranks=(0, 2))
        assert reply.request_id == h.last_id[conn]


def test_new_group_ids_count_up_from_one(h: Harness) -> None:
    ranks = h.start_job(2)

    ids = []
    for members in [(0, 1), (1,), (1, 0)]:
        for rank in (1, 0):
            replies = h.send(ranks[rank], NewGroup.of(ranks=members, timeout=5.0))
        ids.append({r.message.group_id for r in replies})  # type: ignore[union-attr]

    assert ids == [{1}, {2}, {3}]


def test_new_group_with_mismatched_members_fails_every_rank_naming_who_passed_what(
        h: Harness) -> None:
    ranks = h.start_job(3)

    h.send(ranks[0], NewGroup.of(ranks=(0, 1), timeout=5.0))
    h.send(ranks[1], NewGroup.of(ranks=(0, 1), timeout=5.0))
    failed = errors(h.send(ranks[2], NewGroup.of(ranks=(1, 0), timeout=5.0)))

    assert set(failed) == set(ranks.values())
    for error in failed.values():
        assert error.code == "mismatch"
        assert "ranks 0, 1 passed [0, 1]" in error.message
        assert "ranks 2 passed [1, 0]" in error.message


def test_new_group_with_invalid_members_is_refused_to_the_caller(h: Harness) -> None:
    ranks = h.start_job(2)

    for members in [(0, 2), (0, 0), (), (-1,)]:
        refused = errors(h.send(ranks[0], NewGroup.of(ranks=members, timeout=5.0)))
        assert refused[ranks[0]].code == "configuration"


def test_new_group_timeout_fails_the_arrived_ranks_naming_the_missing(h: Harness) -> None:
    ranks = h.start_job(3)
    h.send(ranks[0], NewGroup.of(ranks=(0, 1, 2), timeout=5.0))
    h.send(ranks[2], NewGroup.of(ranks=(0, 1, 2), timeout=5.0))

    assert h.tick(4.9) == []
    failed = errors(h.tick(5.0))

    assert set(failed) == {ranks[0], ranks[2]}
    for error in failed.values():
        assert error.code == "rendezvous_timeout"
        assert "ranks 1 did not arrive" in error.message
        assert "ranks 0, 2 did" in error.message
    assert h.tick(10.0) == []


# -- barrier ---------------------------------------------------------------------------


def test_barrier_completes_only_when_every_member_arrives(h: Harness) -> None:
    ranks = h.start_job(3)

    assert h.send(ranks[0], Barrier(group_id=0, seq=0, timeout=5.0)) == []
    assert h.send(ranks[2], Barrier(group_id=0, seq=0, timeout=5.0)) == []
    replies = h.send(ranks[1], Barrier(group_id=0, seq=0, timeout=5.0))

    got = by_conn(replies)
    assert set(got) == set(ranks.values())
    assert all(isinstance(r.message, Ok) for r in got.values())
    assert all(r.request_id == h.last_id[c] for c, r in got.items())


def test_barriers_with_different_sequence_numbers_do_not_mix(h: Harness) -> None:
    ranks = h.start_job(2)

    assert h.send(ranks[0], Barrier(group_id=0, seq=0, timeout=5.0)) == []
    assert h.send(ranks[1], Barrier(group_id=0, seq=1, timeout=5.0)) == []
    assert len(h.send(ranks[1], Barrier(group_id=0, seq=0, timeout=5.0))) == 2


def test_barrier_on_a_subgroup_needs_only_its_members(h: Harness) -> None:
    ranks = h.start_job(3)
    for rank in range(3):
        h.send(ranks[rank], NewGroup.of(ranks=(0, 2), timeout=5.0))

    assert h.send(ranks[2], Barrier(group_id=1, seq=0, timeout=5.0)) == []
    got = by_conn(h.send(ranks[0], Barrier(group_id=1, seq=0, timeout=5.0)))

    assert set(got) == {ranks[0], ranks[2]}


@pytest.mark.parametrize("group_id", [1, 99])
def test_barrier_on_a_group_the_rank_is_not_in_is_a_configuration_error(
        h: Harness, group_id: int) -> None:
    ranks = h.start_job(3)
    for rank in range(3):
        h.send(ranks[rank], NewGroup.of(ranks=(0, 2), timeout=5.0))

    refused = errors(h.send(ranks[1], Barrier(group_id=group_id, seq=0, timeout=5.0)))

    assert refused[ranks[1]].code == "configuration"
    assert f"group {group_id}" in refused[ranks[1]].message


def test_barrier_timeout_fails_the_arrived_ranks_naming_the_missing(h: Harness) -> None:
    ranks = h.start_job(3)
    h.now = 2.0
    h.send(ranks[1], Barrier(group_id=0, seq=4, timeout=3.0))

    assert h.tick(4.9) == []
    failed = errors(h.tick(5.0))

    assert set(failed) == {ranks[1]}
    assert failed[ranks[1]].code == "timeout"
    assert "ranks 0, 2 did not arrive" in failed[ranks[1]].message
    assert "barrier #4" in failed[ranks[1]].message


# -- leaving and disconnecting -------------------------------------------------------------


def test_leave_is_acknowledged(h: Harness) -> None:
    ranks = h.start_job(2)

    got = by_conn(h.send(ranks[1], Leave()))

    assert got[ranks[1]].message == Ok()
    assert got[ranks[1]].request_id == h.last_id[ranks[1]]


@pytest.mark.parametrize("how", ["leave", "disconnect"])
def test_departure_fails_pending_barrier_it_was_expected_in_with_peer_lost(
        h: Harness, how: str) -> None:
    ranks = h.start_job(3)
    h.send(ranks[0], Barrier(group_id=0, seq=0, timeout=5.0))
    h.send(ranks[1], Barrier(group_id=0, seq=0, timeout=5.0))

    replies = h.send(ranks[2], Leave()) if how == "leave" else h.disconnect(ranks[2])

    failed = {c: r.message for c, r in by_conn(replies).items() if c != ranks[2]}
    assert set(failed) == {ranks[0], ranks[1]}
    for conn, error in failed.items():
        assert isinstance(error, Error)
        assert error.code == "peer_lost"
        assert "rank 2" in error.message
        assert by_conn(replies)[conn].request_id == h.last_id[conn]
    assert h.tick(100.0) == []  # the gathering is gone, no timeout follows


def test_disconnect_fails_pending_new_group_with_peer_lost(h: Harness) -> None:
    ranks = h.start_job(2)
    h.send(ranks[0], NewGroup.of(ranks=(0, 1), timeout=5.0))

    failed = errors(h.disconnect(ranks[1]))

    assert failed[ranks[0]].code == "peer_lost"
    assert "rank 1" in failed[ranks[0]].message
    assert "disconnected" in failed[ranks[0]].message


def test_departure_of_a_non_member_leaves_a_subgroup_barrier_pending(h: Harness) -> None:
    ranks = h.start_job(3)
    for rank in range(3):
        h.send(ranks[rank], NewGroup.of(ranks=(0, 1), timeout=5.0))
    h.send(ranks[0], Barrier(group_id=1, seq=0, timeout=5.0))

    assert by_conn(h.disconnect(ranks[2])) == {}
    got = by_conn(h.send(ranks[1], Barrier(group_id=1, seq=0, timeout=5.0)))

    assert set(got) == {ranks[0], ranks[1]}
    assert all(isinstance(r.message, Ok) for r in got.values())


def test_departure_of_a_rank_that_already_arrived_does_not_fail_the_gathering(
        h: Harness) -> None:
    ranks = h.start_job(3)
    h.send(ranks[2], Barrier(group_id=0, seq=0, timeout=5.0))

    replies = h.disconnect(ranks[2])

    assert by_conn(replies) == {}


@pytest.mark.parametrize("message", [NewGroup.of(ranks=(0, 1), timeout=5.0),
                                     Barrier(group_id=0, seq=0, timeout=5.0)],
                         ids=["new_group", "barrier"])
def test_gathering_started_after_a_member_died_fails_with_peer_lost_at_once(
        h: Harness, message: Message) -> None:
    # A dead rank will never arrive: waiting for the deadline (30 minutes by
    # default) would hang the survivors, which the failure model forbids.
    ranks = h.start_job(2)
    h.disconnect(ranks[1])

    replies = h.send(ranks[0], message)

    assert replies, "rank 0 is left waiting for rank 1, which is gone"
    failed = errors(replies)
    assert failed[ranks[0]].code == "peer_lost"
    assert "rank 1" in failed[ranks[0]].message


def test_requests_after_leave_are_protocol_errors(h: Harness) -> None:
    ranks = h.start_job(2)
    h.send(ranks[0], Leave())

    refused = errors(h.send(ranks[0], Barrier(group_id=0, seq=0, timeout=5.0)))

    assert refused[ranks[0]].code == "protocol"


def test_disconnect_after_leave_is_quiet(h: Harness) -> None:
    ranks = h.start_job(2)
    h.send(ranks[0], Barrier(group_id=0, seq=0, timeout=5.0))
    h.send(ranks[1], Barrier(group_id=0, seq=0, timeout=5.0))
    h.send(ranks[0], Leave())

    assert h.disconnect(ranks[0]) == []
    assert h.state.job_is_active(JOB)


@pytest.mark.parametrize("how", ["leave", "disconnect", "mixed"])
def test_job_is_gone_when_every_member_has_departed(h: Harness, how: str) -> None:
    ranks = h.start_job(3)

    for rank, conn in sorted(ranks.items()):
        assert h.state.job_is_active(JOB)
        if how == "leave" or (how == "mixed" and rank % 2 == 0):
            h.send(conn, Leave())
        else:
            h.disconnect(conn)

    assert not h.state.job_is_active(JOB)
    assert h.state.job_names() == []


def test_same_job_id_can_rendezvous_again_after_everyone_left(h: Harness) -> None:
    ranks = h.start_job(2)
    for rank in range(2):
        h.send(ranks[rank], NewGroup.of(ranks=(0, 1), timeout=5.0))
    for conn in ranks.values():
        h.send(conn, Leave())

    assert h.join(11, world_size=3) == []
    assert h.join(12, world_size=3) == []
    got = welcomes(h.join(13, world_size=3))
    assert set(got) == {11, 12, 13}
    assert all(w.world_size == 3 for w in got.values())
    new_ranks = {w.rank: c for c, w in got.items()}
    for rank in range(3):
        replies = h.send(new_ranks[rank], NewGroup.of(ranks=(0, 1, 2), timeout=5.0))
    assert {r.message for r in replies} == {GroupCreated.of(group_id=1, ranks=(0, 1, 2))}


# -- failure detection -------------------------------------------------------------------


def test_member_silent_past_the_heartbeat_deadline_is_declared_lost_to_everyone(
        h: Harness) -> None:
    for conn in (1, 2, 3):
        h.join(conn, world_size=3, heartbeat_timeout=10.0)
    h.tick(4.0)
    for conn in (1, 3):
        h.send(conn, Heartbeat(ops=5))
    assert h.tick(10.0) == []  # connection 2 silent for exactly the deadline: not yet

    late = notices(h.tick(11.0))

    assert set(late) == {1, 2, 3}
    (to_silent,) = late[2]
    assert isinstance(to_silent, Error) and "declared this rank" in to_silent.message
    for conn in (1, 3):
        (gone,) = late[conn]
        assert isinstance(gone, MemberGone) and gone.how == "lost"
        assert "no heartbeat for 11.0 s (the job allows 10 s)" in gone.reason
    for conn in (1, 3):
        h.send(conn, Heartbeat(ops=6))
    assert h.tick(12.0) == [], "declared lost once"


def test_disconnect_without_leave_is_a_loss_and_leave_is_a_departure(h: Harness) -> None:
    for conn in (1, 2, 3):
        h.join(conn, world_size=3)
    lost = notices(h.disconnect(2))
    left = notices(h.send(3, Leave()))

    assert {c: [(m.rank, m.how) for m in ms] for c, ms in lost.items()} == {
        1: [(1, "lost")], 3: [(1, "lost")]}
    assert {c: [(m.rank, m.how) for m in ms] for c, ms in left.items()} == {1: [(2, "left")]}
    assert all(isinstance(m, MemberGone) and m.hostname == "node-a"
               for ms in lost.values() for m in ms)


def test_leaves_that_come_together_are_told_together_and_answered_after(h: Harness) -> None:
    size = 70  # more than state.TOLD_AT_ONCE_UP_TO
    for conn in range(1, size + 1):
        h.join(conn, rank=conn - 1, world_size=size)
    first = h.send(1, Leave())  # a lone leave: answered, and told at once
    assert by_conn(first)[1].message == Ok()
    assert {c: [(m.rank, m.how) for m in ms] for c, ms in notices(first).items()} == {
        c: [(0, "left")] for c in range(2, size + 1)}

    assert h.send(2, Leave()) == [] and h.send(3, Leave()) == []  # within the same tick
    assert h.tick(0.05) == []  # not yet a tick after the last notice

    told = h.tick(0.1)
    assert notices(told) == {c: [MembersLeft(runs=(1, 2, 1), epoch=3)]
                             for c in range(4, size + 1)}
    assert {c: r.message for c, r in by_conn(told).items()} == {2: Ok(), 3: Ok()}
    assert h.tick(0.3) == []  # told once

    h.now = 0.35
    assert by_conn(h.send(4, Leave()))[4].message == Ok()  # the interval has passed


def test_the_interval_between_notices_of_leaves_grows_with_the_job() -> None:
    h = Harness()
    size = 4096  # an interval of 0.41 s
    for conn in range(1, size + 1):
        h.join(conn, rank=conn - 1, world_size=size)
    assert len(h.send(1, Leave())) == size  # its answer, and a notice to everyone else
    assert h.send(2, Leave()) == []
    assert h.tick(0.4) == []
    assert len(h.tick(0.41)) == size - 2 + 1  # a notice to each still there, an answer


def test_a_small_job_is_told_of_every_leave_at_once(h: Harness) -> None:
    for conn in range(1, 6):
        h.join(conn, rank=conn - 1, world_size=5)
    for conn in (1, 2, 3):
        replies = h.send(conn, Leave())
        assert by_conn(replies)[conn].message == Ok()
        assert set(notices(replies)) == set(range(conn + 1, 6))


def test_a_requested_rank_is_free_again_once_its_peer_disconnects(h: Harness) -> None:
    assert h.join(1, rank=0, world_size=2) == []
    assert h.disconnect(1) == [] and h.join(3, rank=1, world_size=2) == []

    got = welcomes(h.join(2, rank=0, world_size=2))

    assert {conn: w.rank for conn, w in got.items()} == {2: 0, 3: 1}
