"""What a rank waiting for its coordinator or its job says, and when (issue 59)."""

from __future__ import annotations

import itertools

import pytest

from asyncoll._rendezvous.waiting import report_gaps, unreachable_text
from asyncoll._runtime.init_method import resolve

pytestmark = pytest.mark.timeout(30)


def test_a_waiting_rank_first_speaks_within_seconds_then_ever_less_often():
    gaps = list(itertools.islice(report_gaps(3.0, 300.0), 10))

    assert gaps == [3.0, 6.0, 12.0, 24.0, 48.0, 96.0, 192.0, 300.0, 300.0, 300.0]
    # Over torch's default 30 minutes that is a dozen lines, not hundreds.
    times = itertools.accumulate(report_gaps(3.0, 300.0))
    assert len(list(itertools.takewhile(lambda t: t <= 1800, times))) == 11


def test_an_unreachable_line_names_the_address_the_error_and_the_deadline():
    line = unreachable_text("the coordinator", "127.0.0.1:1", 3.2,
                            ConnectionRefusedError(111, "Connection refused"), 1796.8, 1800)

    assert line == ("still waiting for the coordinator at 127.0.0.1:1 after 3 s (the last "
                    "try failed: [Errno 111] Connection refused); this rank gives up in 1797 "
                    "s, at its join's timeout of 1800 s (init_process_group(timeout=...) "
                    "sets it)")


@pytest.mark.parametrize("init, environ, waits_for", [
    ("env://", {"MASTER_ADDR": "h", "MASTER_PORT": "5", "WORLD_SIZE": "2", "RANK": "1"},
     "rank 0 to host the coordinator (or for an asyncoll-coordinator daemon)"),
    ("env://", {"ASYNCOLL_COORDINATOR": "h:5", "WORLD_SIZE": "2", "RANK": "1"},
     "the coordinator that ASYNCOLL_COORDINATOR names"),
    ("tcp://h:5", {"WORLD_SIZE": "2", "RANK": "1"}, "the coordinator"),
])
def test_a_rank_knows_who_should_answer_at_its_coordinator_s_address(init, environ,
                                                                     waits_for):
    assert resolve(None, init, -1, -1, 5.0, None, environ=environ).waits_for == waits_for


def test_an_out_of_range_rank_is_left_for_the_coordinator_to_refuse():
    where = resolve(None, "tcp://h:5", 2, 5, 5.0, None, environ={})

    assert (where.rank, where.world_size, where.may_host) == (5, 2, False)
