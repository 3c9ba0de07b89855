"""What the coordinator's ports hold before authentication, and out of descriptors (issue 56).

The bookkeeping (asyncoll.coordinator.admission) with plain callables, then a
real coordinator whose budget of descriptors is spent: a peer and an HTTP
client are told so, and a peer that meets a daemon that closes at once is
told what that may mean.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.error
import urllib.request

import pytest

from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll.coordinator.admission import GRACE_S, Budget, Door, Throttle, descriptor_budget
from asyncoll.coordinator.server import Coordinator
from asyncoll.errors import RendezvousError

pytestmark = pytest.mark.timeout(30)


class Closed(list[int]):
    """Records which connections were closed: ``closer(n)`` is connection n's close."""

    def closer(self, n: int):
        return lambda: self.append(n)


def test_past_its_bound_a_door_closes_its_oldest_pending_connection() -> None:
    closed = Closed()
    door = Door(Budget(100), bound=3, what="the port")
    tickets = [door.enter(closed.closer(n), float(n)) for n in range(3)]
    assert closed == [] and None not in tickets
    door.enter(closed.closer(3), GRACE_S)
    assert closed == [0] and door.evicted == 1
    assert len(door.pending) == 3 and door.budget.held == 3


def test_young_connections_are_kept_past_the_bound_up_to_twice_it() -> None:
    closed = Closed()
    door = Door(Budget(100), bound=5, what="the port")
    for n in range(10):  # a large job's members, all at once
        assert door.enter(closed.closer(n), n * GRACE_S / 100) is not None
    assert closed == [] and len(door.pending) == 10
    door.enter(closed.closer(10), GRACE_S / 2)  # twice the bound: the oldest goes
    assert closed == [0]
    door.enter(closed.closer(11), GRACE_S + 0.01)  # the oldest is old: it goes
    assert closed == [0, 1] and len(door.pending) == 10


def test_an_admitted_connection_is_never_evicted_and_counts_until_it_leaves() -> None:
    closed = Closed()
    door = Door(Budget(100), bound=2, what="the port")
    member = door.enter(closed.closer(0), 0.0)
    assert member is not None
    door.admit(member)
    for n in range(1, 6):
        door.enter(closed.closer(n), n * GRACE_S)
    assert 0 not in closed and closed == [1, 2, 3]
    assert door.budget.held == 3  # the member and two pending
    door.leave(member)
    assert door.budget.held == 2


def test_leaving_after_eviction_does_not_count_twice() -> None:
    closed = Closed()
    door = Door(Budget(100), bound=1, what="the port")
    first = door.enter(closed.closer(0), 0.0)
    door.enter(closed.closer(1), GRACE_S)
    assert first is not None and closed == [0] and door.budget.held == 1
    door.leave(first)  # its handler ends after the close
    assert door.budget.held == 1


def test_a_spent_budget_takes_the_oldest_pending_of_any_port_then_refuses() -> None:
    closed = Closed()
    budget = Budget(3)
    rendezvous = Door(budget, bound=10, what="the rendezvous port")
    http = Door(budget, bound=10, what="the HTTP port")
    old = http.enter(closed.closer(0), 0.0)
    members = [rendezvous.enter(closed.closer(n), float(n)) for n in (1, 2)]
    for ticket in members:
        assert ticket is not None
        rendezvous.admit(ticket)
    assert old is not None and budget.held == 3
    assert rendezvous.enter(closed.closer(3), 3.0) is not None
    assert closed == [0]  # the HTTP port's idle connection made way
    rendezvous.admit(3)
    assert http.enter(closed.closer(4), 4.0) is None  # all authenticated: refused
    assert http.refused == 1 and budget.held == 3


def test_a_throttle_reports_the_first_event_then_one_line_per_period() -> None:
    throttle = Throttle(period_s=10.0)
    assert throttle.count(0.0) == 1
    assert [throttle.count(t) for t in (1.0, 2.0, 9.0)] == [0, 0, 0]
    assert throttle.count(10.0) == 4  # three held back, and this one
    assert throttle.count(10.5) == 0


def test_an_eviction_is_logged_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    door = Door(Budget(10_000), bound=1, what="the rendezvous port")
    with caplog.at_level(logging.WARNING, "asyncoll.coordinator"):
        for n in range(1000):
            door.enter(lambda: None, GRACE_S * (1 + n / 1000))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and door.evicted == 998  # two are kept for the grace
    assert "the rendezvous port holds at most 1 connections that have not authenticated" \
        in lines[0]


def test_the_budget_is_the_open_files_limit_less_what_is_open() -> None:
    import resource
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert 0 < descriptor_budget() < soft


async def test_a_peer_is_told_when_the_coordinator_is_out_of_descriptors() -> None:
    coordinator = Coordinator("127.0.0.1", 0, b"secret", http_port=0)
    coordinator._door.budget.capacity = 0  # spent: nothing pending to make way
    await coordinator.start()
    try:
        with pytest.raises(RendezvousError, match="out of file descriptors"):
            await CoordinatorClient.connect("127.0.0.1", coordinator.port, 5.0, b"secret")

        def fetch() -> tuple[int, bytes]:
            url = f"http://127.0.0.1:{coordinator.http.port}/api/jobs"
            try:
                with urllib.request.urlopen(url, timeout=10) as reply:
                    return reply.status, reply.read()
            except urllib.error.HTTPError as error:
                return error.code, error.read()
        status, body = await asyncio.to_thread(fetch)
        assert status == 503 and b"out of file descriptors" in body
    finally:
        await coordinator.stop()


async def test_a_coordinator_that_closes_before_greeting_may_be_out_of_descriptors() -> None:
    async def close_at_once(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()
    server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(RendezvousError, match="closed the connection before greeting "
                           "this peer: it may be out of file descriptors"):
            await CoordinatorClient.connect("127.0.0.1", port, 5.0)
    finally:
        server.close()
        await server.wait_closed()
