"""The coordinator with a thousand members and more: right answers, linear work.

Light members speak the real protocol and open no data plane. These tests
assert results and counts (messages, log lines, shared encodings), never
times; benchmarks/scale.py measures the times.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import logging
import math

import pytest

from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._rendezvous.directory import partners
from asyncoll._rendezvous.state import RendezvousState
from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._wire.messages import (
    Address,
    Error,
    Lookup,
    Barrier,
    CheckMembership,
    GroupCreated,
    GroupRecord,
    Join,
    Leave,
    MemberGone,
    MembersLeft,
    Message,
    MissingReply,
    NewGroup,
    Ok,
    PeerInfo,
    Reconfigure,
    Rejoin,
    Welcome,
    WhoIsMissing,
)
from asyncoll._wire.compact import pack_runs
from asyncoll.coordinator import Coordinator
from handshake import until

pytestmark = pytest.mark.timeout(120)

HOSTS = 16


def light_join(i: int, world_size: int, job: str = "big") -> Join:
    """Member ``i``'s join: on host ``i % HOSTS``, so that hosts join interleaved."""
    return Join(job=job, rank=-1, world_size=world_size, host=f"10.0.{i % HOSTS}.1",
                port=20000 + i, hostname=f"node-{i % HOSTS:02d}", pid=i,
                version=PROTOCOL_VERSION, timeout=600.0, heartbeat_timeout=600.0)


def waiting(coordinator: Coordinator, job: str) -> int:
    """How many peers wait in job ``job``'s rendezvous at ``coordinator``."""
    return sum(len(held.waiting) for held in coordinator._state.jobs() if held.name == job)


def check_directory(peers: tuple[PeerInfo, ...], world_size: int) -> None:
    """Every member is in it once, at the address it joined with, hosts' ranks adjacent."""
    assert [p.rank for p in peers] == list(range(world_size))
    members = sorted(p.port - 20000 for p in peers)
    assert members == list(range(world_size))
    for p in peers:
        i = p.port - 20000
        assert (p.host, p.hostname) == (f"10.0.{i % HOSTS}.1", f"node-{i % HOSTS:02d}")
    hosts = [p.hostname for p in peers]
    assert hosts == sorted(hosts), "a host's ranks are not adjacent"


async def test_a_job_of_1024_light_members_rendezvous_groups_meets_and_leaves(caplog):
    size = 1024
    coordinator = Coordinator("127.0.0.1", 0)
    await coordinator.start()
    clients: list[CoordinatorClient] = []
    try:
        clients = list(await asyncio.gather(*(
            CoordinatorClient.connect("127.0.0.1", coordinator.port, timeout=60)
            for _ in range(size))))
        heard: list[list[Message]] = [[] for _ in range(size)]
        for i, client in enumerate(clients):
            client.on_notice = heard[i].append
        with caplog.at_level(logging.INFO, logger="asyncoll.coordinator"):
            joins = [asyncio.ensure_future(c.request(light_join(i, size), 60, "join"))
                     for i, c in enumerate(clients[:-1])]
            await until(lambda: waiting(coordinator, "big") == size - 1,
                        "the 1023 joins reaching the coordinator")
            # Asked by the peer yet to join: of those waiting, one per host is told.
            missing = await clients[-1].request(WhoIsMissing(job="big"), 10, "who is missing")
            assert missing == MissingReply(line="waiting for 1 of 1024 ranks of job 'big': "
                                                "1023 peer(s) without a requested rank have "
                                                "joined")
            joins.append(asyncio.ensure_future(
                clients[-1].request(light_join(size - 1, size), 60, "join")))
            welcomes = await asyncio.gather(*joins)

            assert all(isinstance(w, Welcome) for w in welcomes)
            assert sorted(w.rank for w in welcomes) == list(range(size))  # type: ignore[union-attr]
            first = welcomes[0]
            assert isinstance(first, Welcome)
            assert all(w.directory == first.directory for w in welcomes)  # type: ignore[union-attr]
            check_directory(first.peers, size)
            for i, welcome in enumerate(welcomes):
                assert first.peers[welcome.rank].port == 20000 + i  # type: ignore[union-attr]

            by_rank = sorted(range(size), key=lambda i: welcomes[i].rank)  # type: ignore[union-attr]
            members = [clients[i] for i in by_rank]
            everyone, odd = tuple(range(size)), tuple(range(1, size, 2))
            for ranks, group_id in ((everyone, 1), (odd, 2)):
                created = await asyncio.gather(*(
                    c.request(NewGroup.of(ranks, 60.0), 60, "new_group") for c in members))
                assert set(created) == {GroupCreated.of(group_id, ranks)}
                assert created[0].ranks == ranks  # type: ignore[union-attr]
            met = await asyncio.gather(*(
                members[r].request(Barrier(group_id=2, seq=1, timeout=60.0), 60, "barrier")
                for r in odd))
            assert set(met) == {Ok()}

            # Rank 0 leaves first, alone: every other member hears of it once.
            await members[0].request(Leave(), 10, "leave")
            for _ in range(100):
                if all(heard[i] for i in by_rank[1:]):
                    break
                await asyncio.sleep(0.05)
            for i in by_rank[1:]:
                assert [(g.rank, g.how) for g in heard[i]
                        if isinstance(g, MemberGone)] == [(0, "left")]
            await asyncio.gather(*(c.request(Leave(), 30, "leave") for c in members[1:]))
            assert await coordinator.wait_until_idle("big", 30)

        # One line per rendezvous and group, not one per member.
        lines = [r.getMessage() for r in caplog.records if r.name == "asyncoll.coordinator"]
        assert len(lines) < 20, lines[:30]
        (complete,) = [line for line in lines if "rendezvous complete" in line]
        assert "1024 ranks: node-00 0-63; node-01 64-127;" in complete
        assert any("group 2 created with ranks a list of 512 ranks in 1 runs" in line
                   for line in lines)
    finally:
        await asyncio.gather(*(c.close() for c in clients))
        await coordinator.stop()


def test_4096_members_share_one_directory_one_group_answer_and_few_notices():
    size = 4096
    state = RendezvousState(stall_after_s=math.inf)  # its clock jumps between ticks
    replies = []
    for i in range(size):
        replies = state.handle(i + 1, 1, light_join(i, size), now=0.0)
    welcomes = [r.message for r in replies]
    assert len(welcomes) == size
    assert all(isinstance(w, Welcome) for w in welcomes)
    # The directory is packed once: every Welcome holds the same bytes object.
    assert len({id(w.directory) for w in welcomes}) == 1  # type: ignore[union-attr]
    conn_of = {w.rank: r.conn for w, r in zip(welcomes, replies)}  # type: ignore[union-attr]
    # Past 1024 ranks it lists each host once and no port: the members' ports
    # come from lookups, and each Welcome lists its rank's partners' only.
    assert len(welcomes[0].directory) < 40 * HOSTS  # type: ignore[union-attr]
    address = {}
    for rank in range(size):
        reply = state.handle(conn_of[size - 1 - rank], 9, Lookup(rank=rank, generation=0), 0.5)
        assert len(reply) == 1 and isinstance(reply[0].message, Address)
        address[rank] = reply[0].message
    check_directory(tuple(PeerInfo(p.rank, p.host, address[p.rank].port, p.hostname)
                          for p in welcomes[0].peers), size)  # type: ignore[union-attr]
    for welcome in welcomes:
        assert isinstance(welcome, Welcome)
        listed = {p.rank: p.port for p in welcome.peers if p.port}
        assert sorted(listed) == partners(welcome.rank, size)
        assert len(listed) <= 3 * 12 and all(address[r].port == listed[r] for r in listed)
    refused = state.handle(conn_of[0], 10, Lookup(rank=size, generation=0), 0.5)
    assert isinstance(refused[0].message, Error) and refused[0].message.code == "protocol"
    assert f"no address for rank {size}: rank {size} is not a member" in refused[0].message.message

    request = NewGroup.of(tuple(range(size)), 60.0)
    for rank in range(size):
        replies = state.handle(conn_of[rank], 2, request, now=1.0)
    assert len(replies) == size and len({id(r.message) for r in replies}) == 1

    # Half leave between two ticks: the first is told at once, the others in
    # one notice each to the other half, naming them all.
    first = state.handle(conn_of[0], 3, Leave(), now=2.0)
    assert {type(r.message) for r in first[1:]} == {MemberGone} and len(first) == size
    for rank in range(1, size // 2):  # answered once the others are told
        assert state.handle(conn_of[rank], 3, Leave(), now=2.0) == []
    assert state.tick(2.4) == []  # 4096 members: at most one notice every 0.41 s
    replies = state.tick(2.41)
    notices = [r for r in replies if r.request_id == 0]
    assert len(notices) == size // 2 and len({id(n.message) for n in notices}) == 1
    batch = notices[0].message
    assert isinstance(batch, MembersLeft) and batch.runs == (1, size // 2 - 1, 1)
    assert sorted(r.conn for r in replies if r.request_id == 3) == sorted(
        conn_of[rank] for rank in range(1, size // 2))
    # The rest leave within the interval after that notice: nobody is left to
    # tell, and the last leave answers them all.
    for rank in range(size // 2, size - 1):
        assert state.handle(conn_of[rank], 3, Leave(), now=2.5) == []
    last = state.handle(conn_of[size - 1], 3, Leave(), now=2.5)
    assert {r.conn for r in last} == {conn_of[rank] for rank in range(size // 2, size)}
    assert {r.message for r in last} == {Ok()}
    assert state.tick(3.0) == []
    assert not state.job_is_active("big")


def test_an_elastic_job_of_2048_goes_on_without_a_lost_member():
    size = 2048
    state = RendezvousState(ports_in_welcome_up_to=size)  # to read the ports off the Welcome
    replies = []
    for i in range(size):
        join = dataclasses.replace(light_join(i, size, job="elastic"), elastic=1)
        replies = state.handle(i + 1, 1, join, now=0.0)
    conn_of = {r.message.rank: r.conn for r in replies}  # type: ignore[union-attr]

    lost = state.disconnect(conn_of[7], now=1.0)
    assert {r.message.rank for r in lost} == {7}  # type: ignore[union-attr]
    assert len(lost) == size - 1  # told at once, to each member still there
    survivors = [r for r in range(size) if r != 7]
    for rank in survivors:
        replies = state.handle(conn_of[rank], 2, CheckMembership(timeout=60.0), now=2.0)
    assert len(replies) == size - 1
    assert {(r.message.changed, r.message.gone) for r in replies} == {  # type: ignore[union-attr]
        (1, (7,))}
    for rank in survivors:
        replies = state.handle(conn_of[rank], 3, Reconfigure(
            timeout=60.0, host=f"10.1.0.{rank % 250}", port=30000 + rank), now=3.0)

    welcomes = [r.message for r in replies]
    assert len(welcomes) == size - 1 and all(isinstance(w, Welcome) for w in welcomes)
    assert len({id(w.directory) for w in welcomes}) == 1  # type: ignore[union-attr]
    assert {w.generation for w in welcomes} == {1}  # type: ignore[union-attr]
    peers = welcomes[0].peers  # type: ignore[union-attr]
    assert [p.port - 30000 for p in peers] == survivors  # survivors keep their order


async def test_a_restarted_coordinator_takes_back_a_job_of_1024_light_members(caplog):
    """Every member reconnects at once and re-registers; one adoption, a few log lines."""
    size = 1024
    first = Coordinator("127.0.0.1", 0)
    await first.start()
    port = first.port
    clients: list[CoordinatorClient] = []
    restarted: Coordinator | None = None
    try:
        clients = list(await asyncio.gather(*(
            CoordinatorClient.connect("127.0.0.1", port, timeout=60) for _ in range(size))))
        welcomes = await asyncio.gather(*(c.request(light_join(i, size), 60, "join")
                                          for i, c in enumerate(clients)))
        created = await asyncio.gather(*(c.request(NewGroup.of(tuple(range(size)), 60.0), 60,
                                                   "new_group") for c in clients))
        assert set(created) == {GroupCreated.of(1, tuple(range(size)))}
        digest = hashlib.blake2b(welcomes[0].directory, digest_size=8).hexdigest()  # type: ignore[union-attr]
        for i, (client, welcome) in enumerate(zip(clients, welcomes)):
            client.rejoin = functools.partial(light_rejoin, i, welcome.rank, size, digest)  # type: ignore[union-attr]
        with caplog.at_level(logging.INFO, logger="asyncoll.coordinator"):
            await first.stop()  # it says so in a line, not one per member
            restarted = Coordinator("127.0.0.1", port)
            await restarted.start()
            for _ in range(600):
                if all(c.up for c in clients):
                    break
                await asyncio.sleep(0.05)
            assert all(c.up for c in clients)
            created = await asyncio.gather(*(c.request(NewGroup.of((0, 1), 60.0), 60,
                                                       "new_group") for c in clients))
            assert set(created) == {GroupCreated.of(2, (0, 1))}
        lines = [r.getMessage() for r in caplog.records if r.name == "asyncoll.coordinator"]
        assert len(lines) < 10, lines[:20]
        assert "adopted job 'big': 1024 members, generation 0" in lines
    finally:
        await asyncio.gather(*(c.close() for c in clients))
        await first.stop()
        if restarted is not None:
            await restarted.stop()


def light_rejoin(i: int, rank: int, size: int, digest: str) -> Rejoin:
    """Member ``i``'s re-registration as rank ``rank``, after one new_group of everyone."""
    join = light_join(i, size)
    everyone = pack_runs(tuple(range(size)))
    return Rejoin(job=join.job, rank=rank, world_size=size, generation=0,
                  version=PROTOCOL_VERSION, host=join.host, port=join.port,
                  hostname=join.hostname, pid=join.pid, heartbeat_timeout=600.0, elastic=0,
                  min_size=0, max_size=0, directory_digest=digest,
                  groups=(GroupRecord(0, everyone, 0), GroupRecord(1, everyone, 0)),
                  new_group_calls=1, checks=0, gone=(), epoch=0)
