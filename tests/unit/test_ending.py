"""How a process ends, in its leave at exit, and what the coordinator makes of it (issue 59).

A process that exits on an uncaught exception leaves with the words of how;
the coordinator tells the others it was lost (MemberGone "lost", a
peer_lost error for the agreements that waited on it), as for a killed
process, and still answers its leave. An orderly leave stays "left".
"""

from __future__ import annotations

import sys

import pytest

from asyncoll._runtime import ending
from asyncoll._wire.messages import Barrier, Leave, MemberGone, Ok
from asyncoll.errors import PeerLostError

from .test_rendezvous_state import Harness, by_conn, errors, notices

pytestmark = pytest.mark.timeout(60)

RAISED = ("its program raised ValueError (bad batch) and exited without calling "
          "destroy_process_group")


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_an_uncaught_exception_is_named_with_its_type_and_message() -> None:
    assert ending.describe(ValueError("bad batch")) == RAISED


def test_a_keyboard_interrupt_is_named_as_sigint() -> None:
    assert ending.describe(KeyboardInterrupt()) == (
        "its process was interrupted (KeyboardInterrupt: SIGINT or Ctrl-C) without calling "
        "destroy_process_group")


def test_an_exception_of_a_library_is_named_with_its_module_and_a_long_message_is_cut(
        ) -> None:
    said = ending.describe(TimeoutError("y\n" * 500))

    assert said.startswith("its program raised TimeoutError (y y ")
    assert "..." in said and len(said) < ending.MESSAGE_CHARS + 100
    assert "raised asyncoll.errors.PeerLostError (rank 3 was lost)" in ending.describe(
        PeerLostError("rank 3 was lost"))


def test_the_last_uncaught_exception_is_how_the_process_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "ps1", raising=False)
    monkeypatch.setattr(sys, "last_exc", ValueError("bad batch"), raising=False)
    monkeypatch.setattr(sys, "last_value", ValueError("bad batch"), raising=False)

    assert ending.how_it_ended() == RAISED


def test_no_uncaught_exception_or_an_interactive_prompt_is_an_orderly_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "ps1", raising=False)
    monkeypatch.delattr(sys, "last_exc", raising=False)
    monkeypatch.delattr(sys, "last_value", raising=False)
    assert ending.how_it_ended() == ""

    monkeypatch.setattr(sys, "last_value", ValueError("typed at the prompt"), raising=False)
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert ending.how_it_ended() == ""


def test_a_leave_that_says_how_the_process_ended_is_told_as_a_loss(h: Harness) -> None:
    ranks = h.start_job(3)

    replies = h.send(ranks[1], Leave(ended=RAISED))

    assert by_conn(replies)[ranks[1]].message == Ok()
    told = notices(replies)
    assert set(told) == {ranks[0], ranks[2]}
    for (gone,) in told.values():
        assert isinstance(gone, MemberGone)
        assert (gone.rank, gone.how, gone.reason) == (1, "lost", RAISED)
    assert h.state.tally.members_lost == 1


def test_a_leave_that_says_how_it_ended_fails_a_barrier_waiting_on_it_naming_how(
        h: Harness) -> None:
    ranks = h.start_job(2)
    h.send(ranks[0], Barrier(group_id=0, seq=0, timeout=5.0))

    failed = errors([r for r in h.send(ranks[1], Leave(ended=RAISED)) if r.conn == ranks[0]])

    assert failed[ranks[0]].code == "peer_lost"
    assert f"rank 1 on node-a was lost: {RAISED}" in failed[ranks[0]].message


def test_an_orderly_leave_is_still_told_as_left(h: Harness) -> None:
    ranks = h.start_job(2)

    replies = h.send(ranks[1], Leave())

    assert by_conn(replies)[ranks[1]].message == Ok()
    ((gone,),) = notices(replies).values()
    assert isinstance(gone, MemberGone) and gone.how == "left"
    assert h.state.tally.members_lost == 0
