"""DirectLinks: a group's own blocking connections, members as threads over loopback TCP.

What is tested is the record protocol and its waits: matching by (member,
step), records of an operation not reached yet kept, large records both
ways at once without blocking each other, and every way a wait ends early
(a closed connection, an ABORT record, a record of another operation, the
deadline, the failure check).
"""

from __future__ import annotations

import select
import socket
import threading
import time

import numpy as np
import pytest

from asyncoll._algorithms.team import as_bytes
from asyncoll._transport.link_errors import LinkAborted, LinkLost, LinkMismatch, LinksExpired
from asyncoll._transport.links import DirectLinks

pytestmark = pytest.mark.timeout(60)

FINGERPRINT = (1, 2, 3, 0, -1, 10)


def pair() -> tuple[DirectLinks, DirectLinks]:
    """Links of member 0 and member 1 to each other."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    server.close()
    return DirectLinks({1: client}), DirectLinks({0: accepted})


def both(first, second) -> list[object]:
    """Run first() and second() on two threads; return their results (or errors)."""
    results: list[object] = [None, None]

    def one(index, call):
        try:
            results[index] = call()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            results[index] = exc

    threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a member is stuck"
    return results


def stamp(links: DirectLinks, operation: int, seconds: float = 20.0, check=None,
          fingerprint=FINGERPRINT) -> None:
    links.stamp(operation, fingerprint, time.monotonic() + seconds,
                check or (lambda waiting_for: None))


def exchange(links: DirectLinks, peer: int, operation: int, payload: np.ndarray,
             out: np.ndarray) -> np.ndarray:
    stamp(links, operation)
    links.post(peer, 0, as_bytes(out))
    links.send(peer, 0, as_bytes(payload))
    links.wait_received(peer, 0)
    links.flush()
    return out


def test_large_records_both_ways_at_once_do_not_block_each_other():
    a, b = pair()
    size = 4 << 20  # far past the sockets' buffers
    data = [np.full(size, i + 1, np.uint8) for i in range(2)]
    outs = [np.zeros(size, np.uint8) for _ in range(2)]
    got = both(lambda: exchange(a, 1, 1, data[0], outs[0]),
               lambda: exchange(b, 0, 1, data[1], outs[1]))
    assert (got[0] == 2).all() and (got[1] == 1).all()


def test_a_peer_running_ahead_has_its_records_kept_for_the_next_operation():
    a, b = pair()
    sent = threading.Event()

    def fast():
        for k in (1, 2, 3):
            stamp(a, k)
            a.send(1, 0, as_bytes(np.full(3, k, np.int64)))
        a.flush()
        sent.set()

    def slow():
        # Every record has left member 0 (flushed) before its receive is posted.
        assert sent.wait(10), "member 0 never flushed its records"
        got = []
        for k in (1, 2, 3):
            stamp(b, k)
            out = np.zeros(3, np.int64)
            b.post(0, 0, as_bytes(out))
            b.wait_received(0, 0)
            got.append(int(out[0]))
        return got

    assert both(fast, slow)[1] == [1, 2, 3]


def test_a_record_of_another_operation_is_a_mismatch():
    a, b = pair()

    def sender():
        stamp(a, 1, fingerprint=(9, 9, 9, 0, -1, 10))
        a.send(1, 0, as_bytes(np.zeros(10, np.uint8)))
        a.flush()

    def receiver():
        stamp(b, 1)
        b.post(0, 0, as_bytes(np.zeros(10, np.uint8)))
        b.wait_received(0, 0)

    error = both(sender, receiver)[1]
    assert isinstance(error, LinkMismatch) and error.index == 0 and error.theirs[0] == 9


def test_closed_connection_abort_record_deadline_and_check_end_a_wait():
    a, b = pair()
    stamp(b, 1)
    b.post(0, 0, as_bytes(np.zeros(4, np.uint8)))
    a.abort(1, "timeout", 7)
    with pytest.raises(LinkAborted) as aborted:
        b.wait_received(0, 0)
    assert (aborted.value.index, aborted.value.operation, aborted.value.code,
            aborted.value.rank) == (0, 1, "timeout", 7)

    a, b = pair()
    stamp(b, 1, seconds=0.2)
    b.post(0, 0, as_bytes(np.zeros(4, np.uint8)))
    with pytest.raises(LinksExpired) as expired:
        b.wait_received(0, 0)
    assert expired.value.waiting_for == [0]

    class Lost(Exception):
        pass

    def check(waiting_for):
        raise Lost(waiting_for)

    stamp(b, 2, seconds=3600, check=check)  # only the check can end this wait
    b.post(0, 1, as_bytes(np.zeros(4, np.uint8)))
    with pytest.raises(Lost):
        b.wait_received(0, 1)

    a.close()
    stamp(b, 3)
    b.post(0, 0, as_bytes(np.zeros(4, np.uint8)))
    with pytest.raises(LinkLost, match="closed by the peer"):
        b.wait_received(0, 0)


def test_a_record_kept_for_later_is_checked_when_its_receive_is_posted():
    a, b = pair()
    stamp(a, 2, fingerprint=(9, 9, 9, 0, -1, 10))  # a runs ahead into another operation
    a.send(1, 0, as_bytes(np.zeros(10, np.uint8)))
    a.flush()
    stamp(b, 1)
    b.post(0, 5, as_bytes(np.zeros(1, np.uint8)))
    with pytest.raises(LinksExpired):  # reads (and keeps) a's record while it waits
        stamp(b, 1, seconds=0.1)
        b.wait_received(0, 5)
    stamp(b, 2)
    with pytest.raises(LinkMismatch) as mismatch:
        b.post(0, 0, as_bytes(np.zeros(10, np.uint8)))
    assert mismatch.value.theirs[0] == 9


def test_a_record_kept_early_is_checked_at_the_first_wait_of_its_operation():
    # b waits for another record of the operation (as a broadcast's member waits
    # for its parent, not for a): a's record, of another operation, must still
    # end the wait at once, and one never taken must end the next operation's.
    for later, expected in ((2, 2), (3, 2)):
        a, b = pair()
        stamp(a, 2, fingerprint=(9, 9, 9, 0, -1, 10))
        a.send(1, 0, as_bytes(np.zeros(10, np.uint8)))
        a.flush()
        b.post(0, 5, as_bytes(np.zeros(1, np.uint8)))
        with pytest.raises(LinksExpired):  # reads (and keeps) a's record while it waits
            stamp(b, 1, seconds=0.2)
            b.wait_received(0, 5)
        stamp(b, later, seconds=20)
        b.post(0, 7, as_bytes(np.zeros(1, np.uint8)))
        with pytest.raises(LinkMismatch) as mismatch:
            b.wait_received(0, 7)
        assert (mismatch.value.theirs[0], mismatch.value.operation) == (9, expected)


def star() -> tuple[DirectLinks, DirectLinks, DirectLinks, socket.socket]:
    """Links of member 0 to members 1 and 2, and theirs to it, stamped for operation 1;
    and member 0's socket to member 2."""
    server = socket.create_server(("127.0.0.1", 0))
    to_1 = socket.create_connection(server.getsockname())
    from_0, _ = server.accept()
    to_2 = socket.create_connection(server.getsockname())
    from_0_at_2, _ = server.accept()
    server.close()
    zero = DirectLinks({1: to_1, 2: to_2})
    one, two = DirectLinks({0: from_0}), DirectLinks({0: from_0_at_2})
    for links in (zero, one, two):
        stamp(links, 1)
    return zero, one, two, to_2


def test_a_member_that_closed_fails_only_waits_for_it():
    # Member 2 sent its last record and closed (it finished the group's last
    # operation first); member 0 still waits for member 1, and must get it.
    zero, one, two, to_2 = star()
    two.send(0, 0, as_bytes(np.full(2, 2, np.int64)))
    two.flush()
    two.close()
    from_two, from_one = np.zeros(2, np.int64), np.zeros(2, np.int64)
    zero.post(2, 0, as_bytes(from_two))
    zero.post(1, 0, as_bytes(from_one))
    zero.wait_received(2, 0)
    # Member 2's end of stream is there to be read (its record was read already).
    assert select.select([to_2], [], [], 20)[0], "member 2's end of stream never came"
    one.send(0, 0, as_bytes(np.full(2, 1, np.int64)))
    one.flush()
    zero.wait_received(1, 0)
    assert (from_two == 2).all() and (from_one == 1).all()
    stamp(zero, 2)
    zero.post(2, 0, as_bytes(np.zeros(2, np.int64)))
    with pytest.raises(LinkLost, match="closed by the peer"):
        zero.wait_received(2, 0)



def test_a_record_that_came_before_its_sender_closed_is_still_taken():
    # Member 2 sent its last record and closed while member 0 waited for
    # member 1; that wait read both the record and the end of stream. Member
    # 0's wait for member 2's record then has what it waits for (the
    # hierarchy's barrier between 4 hosts failed this way when the first
    # host's leader left after its last neighbour check).
    zero, one, two, _ = star()
    from_two, from_one = np.zeros(2, np.int64), np.zeros(2, np.int64)
    zero.post(2, 0, as_bytes(from_two))
    zero.post(1, 0, as_bytes(from_one))
    two.send(0, 0, as_bytes(np.full(2, 2, np.int64)))
    two.flush()
    two.close()

    def one_later() -> None:
        # Member 0's wait for member 1 reads member 2's stream meanwhile (and its end).
        deadline = time.monotonic() + 10
        while not zero.received(2, 0) and time.monotonic() < deadline:
            time.sleep(0.001)
        one.send(0, 0, as_bytes(np.full(2, 1, np.int64)))
        one.flush()

    sender = threading.Thread(target=one_later)
    sender.start()
    zero.wait_received(1, 0)
    sender.join(10)
    zero.wait_received(2, 0)
    zero.flush()
    assert (from_two == 2).all() and (from_one == 1).all()

def on_threads(links: list[DirectLinks], member) -> list[object]:
    """Run ``member(me)`` for every member on a thread of its own; close the links after;
    return what each returned."""
    results: list[object] = [None] * len(links)

    def run(me: int) -> None:
        results[me] = member(me)

    threads = [threading.Thread(target=run, args=(me,)) for me in range(len(links))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for one in links:
        one.close()
    assert not any(thread.is_alive() for thread in threads), "a member is stuck"
    return results


def mesh(n: int) -> list[DirectLinks]:
    """Links of ``n`` members, every one to every other, over loopback."""
    sockets: list[dict[int, socket.socket]] = [{} for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            server = socket.create_server(("127.0.0.1", 0))
            sockets[i][j] = socket.create_connection(server.getsockname())
            sockets[j][i], _ = server.accept()
            server.close()
    return [DirectLinks(one) for one in sockets]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("count", [0, 1, 1000])
def test_doubling_in_plain_calls_meets_the_coroutine_and_both_get_the_same_bits(n, count):
    """Half the members run DoublingOnLinks, half the transport's coroutine over a
    Team over its LinksMesh (with its neighbour check): the records match, and every member gets
    the sum the fixed combining order gives, bit for bit (NaN payloads too)."""
    from asyncoll._algorithms.doubling import DoublingOnLinks, recursive_doubling_all_reduce
    from asyncoll._algorithms.team import Team, run_here
    from asyncoll.types import ReduceOp

    rng = np.random.default_rng(n * 1000 + count)
    inputs = [rng.standard_normal(count).astype(np.float32) for _ in range(n)]
    if count:
        for me, one in enumerate(inputs):
            # A NaN with a payload of each member's own: which one survives tells
            # the order every pair combined in.
            one[:1].view(np.uint32)[0] = 0x7FC00000 | (me + 1)
    links = mesh(n)

    class Step:  # what DoublingOnLinks.run reads of the group's LinksStep
        def __init__(self, links):
            self.links = links

    def member(me: int) -> None:
        data = inputs[me].copy()
        try:
            for operation in (1, 2):  # twice: the second is a repeat on the same object
                stamp(links[me], operation)
                if me % 2:
                    DoublingOnLinks(me, n, data.dtype, count, ReduceOp.SUM,
                                    lambda dtype, k: np.empty(k, dtype)).run(Step(links[me]),
                                                                             data)
                else:
                    team = Team(links[me].mesh, range(n), 0, operation, me=me)
                    run_here(recursive_doubling_all_reduce(team, data, ReduceOp.SUM,
                                                           np.empty_like(data)))
                    run_here(team.check_neighbours())
                result = data.copy()
                data[...] = inputs[me]
            return result
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            return exc

    results = on_threads(links, member)
    for result in results:
        assert isinstance(result, np.ndarray), result
    for result in results[1:]:
        assert result.tobytes() == results[0].tobytes()
    np.testing.assert_allclose(results[0][1:], np.sum(inputs, axis=0)[1:], rtol=1e-5,
                               atol=1e-5)


def test_doubling_in_plain_calls_of_another_size_is_a_mismatch():
    """A member whose array differs in size from its partner's fails; it is not silently
    reduced."""
    from asyncoll._algorithms.doubling import DoublingOnLinks
    from asyncoll.types import ReduceOp

    a, b = pair()

    class Step:
        def __init__(self, links):
            self.links = links

    def run(links, me, count):
        stamp(links, 1)
        data = np.ones(count, np.float32)
        DoublingOnLinks(me, 2, data.dtype, count, ReduceOp.SUM,
                        lambda dtype, k: np.empty(k, dtype)).run(Step(links), data)

    results = both(lambda: run(a, 0, 4), lambda: run(b, 1, 5))
    assert all(isinstance(result, LinkMismatch) for result in results), results


def lazy(n: int) -> list[DirectLinks]:
    """Links of ``n`` members that open connections only as records need them."""
    import secrets

    from asyncoll._transport.link_opening import Dialling

    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    cookies = [secrets.randbits(62) for _ in range(n)]
    addresses = [("127.0.0.1", s.getsockname()[1], c) for s, c in zip(servers, cookies)]
    return [DirectLinks({}, 64, Dialling(servers[i], i, cookies[i], addresses))
            for i in range(n)]


@pytest.mark.parametrize("n", [2, 5, 8, 16])
def test_lazy_links_connect_only_the_partners_recursive_doubling_uses(n):
    """Each member ends with a connection to its doubling partners and neighbours only
    (log2 N + 2 at most, not N - 1), opened by the lower member of each pair
    while the higher one's records wait, and every member gets the same sum."""
    from asyncoll._algorithms.doubling import DoublingOnLinks, plan_of
    from asyncoll.types import ReduceOp

    links = lazy(n)

    class Step:
        def __init__(self, links):
            self.links = links

    def member(me: int) -> None:
        try:
            for operation in (1, 2, 3):
                data = np.full(4, me + operation, np.float64)
                stamp(links[me], operation)
                DoublingOnLinks(me, n, data.dtype, 4, ReduceOp.SUM,
                                lambda dtype, k: np.empty(k, dtype)).run(Step(links[me]), data)
            return data, links[me].connected
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            return exc

    results = on_threads(links, member)
    expected = sum(me + 3 for me in range(n))
    for me, result in enumerate(results):
        assert isinstance(result, tuple), result
        data, connected = result
        assert (data == expected).all()
        plan = plan_of(n, me)
        partners = {p for _, p, _ in plan.rounds} | {plan.hands_to, plan.takes_from,
                                                      plan.check_left, plan.check_right}
        assert connected == len(partners - {-1}), (me, connected)
        assert connected <= (n - 1).bit_length() + 2


def test_a_connection_without_the_cookie_is_dropped_and_the_members_go_on():
    zero, one = lazy(2)
    stranger = socket.create_connection(("127.0.0.1", one._dialling.server.getsockname()[1]))
    stranger.sendall(b"\0" * 16)  # a greeting with the wrong cookie
    results = both(lambda: exchange(zero, 1, 1, np.arange(3.0), np.zeros(3)),
                   lambda: exchange(one, 0, 1, np.arange(3.0) * 2, np.zeros(3)))
    assert [r.tolist() for r in results] == [[0.0, 2.0, 4.0], [0.0, 1.0, 2.0]]
    assert stranger.recv(1) == b""  # closed by member 1
    stranger.close()
    zero.close()
    one.close()


def test_an_abort_for_a_later_operation_fails_that_one_not_the_one_running():
    zero, one = pair()
    stamp(zero, 1)
    stamp(one, 1)
    one.abort(2, "MismatchError", -1, "later")  # ahead of the record, on one connection
    one.send(0, 0, as_bytes(np.ones(2)))
    one.flush()
    got = np.zeros(2)
    zero.post(1, 0, as_bytes(got))
    zero.wait_received(1, 0)  # operation 1 completes: the ABORT is for operation 2
    assert (got == 1).all()
    stamp(zero, 2)
    zero.post(1, 0, as_bytes(got))
    with pytest.raises(LinkAborted, match="later"):
        zero.wait_received(1, 0)
