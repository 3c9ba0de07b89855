"""A job past --ports-in-welcome-up-to: Welcomes without every port, and lookups.

The coordinator's side, with the fake clock: what each Welcome lists, what a
lookup answers in each generation of an elastic job, and what it refuses.
"""

from __future__ import annotations

import pytest

from asyncoll._rendezvous.directory import partners
from asyncoll._rendezvous.state import RendezvousState
from asyncoll._wire.compact import pack_directory, pack_ports, unpack_directory, unpack_ports
from asyncoll._wire.messages import Address, Error, Lookup, Message, Welcome
from asyncoll.errors import ProtocolError

from .test_elastic_state import check, reconfigure, start
from .test_rendezvous_state import Harness, welcomes

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.state = RendezvousState(ports_in_welcome_up_to=0)
    return harness


def lookup(h: Harness, conn: int, rank: int, generation: int) -> Message:
    replies = h.send(conn, Lookup(rank=rank, generation=generation))
    assert [r.conn for r in replies] == [conn]
    return replies[0].message


def test_partners_are_the_xor_and_plus_minus_powers_of_two() -> None:
    assert partners(0, 8) == [1, 2, 4, 6, 7]
    assert partners(5, 6) == [0, 1, 3, 4]  # 5^2 = 7 is no rank; 5+1 wraps to 0
    assert partners(0, 1) == []
    assert all(len(partners(r, 16384)) <= 3 * 14 for r in (0, 8191, 16383))


def test_every_member_can_look_up_any_other(h):
    conn_of = start(h, size=8)
    for rank, conn in conn_of.items():
        for other in range(8):
            assert lookup(h, conn, other, 0) == Address(
                rank=other, host=f"10.0.0.{conn_of[other]}", port=40000 + conn_of[other])


def test_a_welcome_past_the_bound_leaves_the_other_ports_out(h):
    replies = []
    for conn in range(1, 9):
        replies = h.join(conn, world_size=8, hostname=f"node-{conn}")
    got = welcomes(replies)
    assert len(got) == 8
    for conn, welcome in got.items():
        peers = welcome.peers
        assert [p.host for p in peers] == [f"10.0.0.{c}" for c in sorted(
            got, key=lambda c: got[c].rank)]
        listed = sorted(p.rank for p in peers if p.port)
        assert listed == partners(welcome.rank, 8)
        assert peers[welcome.rank].port == 0  # not even its own: it knows it
    assert len({w.directory for w in got.values()}) == 1


def test_lookups_follow_the_generation_and_refuse_the_old_one(h):
    ranks = start(h, size=4)
    h.disconnect(ranks[2])
    survivors = [ranks[0], ranks[1], ranks[3]]
    check(h, survivors)
    old = lookup(h, ranks[0], 3, 0)  # before the reconfigure: generation 0 still
    assert old == Address(rank=3, host=f"10.0.0.{ranks[3]}", port=40000 + ranks[3])
    new = welcomes(reconfigure(h, survivors))
    assert {w.generation for w in new.values()} == {1}
    # Rank 2 of generation 1 is the old rank 3, at the address it gave reconfigure.
    assert lookup(h, ranks[0], 2, 1) == Address(rank=2, host=f"10.0.1.{ranks[3]}",
                                               port=50000 + ranks[3])
    stale = lookup(h, ranks[0], 2, 0)
    assert isinstance(stale, Error) and stale.code == "group_broken"
    assert stale.message == ("no address for rank 2: job 'job-1' is at generation 1, not 0: "
                             "its members of then are not listed any more")
    beyond = lookup(h, ranks[0], 3, 1)
    assert isinstance(beyond, Error) and beyond.code == "protocol"
    assert "rank 3 is not a member of job 'job-1' (3 members)" in beyond.message


def test_a_lookup_needs_a_completed_join(h):
    h.join(1, world_size=2)
    refused = lookup(h, 1, 0, 0)
    assert isinstance(refused, Error) and refused.code == "protocol"
    assert "a lookup request needs a completed join first" in refused.message


def test_the_directory_packs_with_or_without_ports() -> None:
    peers = [("10.0.0.1", 40001, "a"), ("10.0.0.1", 40002, "a"), ("10.0.0.2", 40003, "b")]
    assert unpack_directory(pack_directory(peers)) == peers
    assert unpack_directory(pack_directory(peers, with_ports=False)) == [
        (host, 0, name) for host, _, name in peers]
    assert unpack_ports(pack_ports([(2, 40003), (0, 40001)]), 3) == {2: 40003, 0: 40001}
    assert unpack_ports(b"", 3) == {}
    with pytest.raises(ProtocolError, match="ports are malformed"):
        unpack_ports(pack_ports([(3, 1)]), 3)
    with pytest.raises(ProtocolError, match="ports are malformed"):
        unpack_ports(b"\x00" * 7, 3)


def test_a_welcome_reads_its_ports_over_the_directory() -> None:
    directory = pack_directory([("h", 1, "a"), ("h", 2, "a"), ("h", 3, "a")], with_ports=False)
    welcome = Welcome(rank=0, world_size=3, directory=directory, ports=pack_ports([(2, 9)]))
    assert [p.port for p in welcome.peers] == [0, 0, 9]
