"""A rank whose process ends on an exception, without destroy_process_group, is lost.

Issue 59: a rank that raised, or got SIGINT, between collectives was reported
to the others as if it had left in order (a MismatchError: "the ranks called
different numbers of collectives"). Its exit hook now says how it ended, and
the coordinator tells the others it was lost: they raise PeerLostError naming
it and how it ended. A rank that called destroy_process_group keeps the words
of a rank that left. Real processes against a coordinator daemon
(workers/crashing.py), on each path rank 0 may wait on.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from .conftest import WORKERS, Daemon, end_all, finish, tell, wait_ready

pytestmark = pytest.mark.timeout(120)

RAISED = re.compile(r"RAISED (\w+) peer_lost=(\w+) rank=(\S+) :: (.*)")
#: ELEMENTS and environment that put rank 0's second all_reduce on each path: the
#: same-host arena, the direct links (no shared memory), the rings (no arena).
PATHS = {"arena": (256, {}), "links": (256, {"ASYNCOLL_SHM": "0"}),
         "rings": (1_000_000, {"ASYNCOLL_ARENA_BYTES": "0"})}


class Outcome(NamedTuple):
    kind: str
    peer_lost: bool
    named: str
    message: str
    victim_code: int
    victim_stderr: str
    daemon_log: str

    def __str__(self) -> str:
        """Every field in full (a failed assertion shows it): pytest cuts a tuple's repr."""
        return "\n".join(f"{name}: {value}" for name, value in self._asdict().items())


def end_rank_1(tmp_path: Path, how: str, path: str = "arena", when: str = "inside") -> Outcome:
    """Run workers/crashing.py's job; end rank 1 ``how``; what rank 0 raised."""
    daemon = Daemon(tmp_path)
    elements, env = PATHS[path]
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "crashing.py"), daemon.address,
                               str(rank), f"{how}-{path}-{when}", how, str(elements), when],
                              env={**os.environ, **env}, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    try:
        wait_ready(procs)
        if when == "inside":  # rank 0 waits in its all_reduce first
            assert procs[0].stdout is not None
            assert procs[0].stdout.readline() == "CALLING\n"
            assert procs[0].stdout.readline() == "WAITING\n"
        if how == "sigint":
            procs[1].send_signal(signal.SIGINT)
        else:
            tell(procs[1])
        victim_code, _, victim_stderr = finish(procs[1], timeout=30)
        if when == "after":
            daemon.wait_for_log("rank 1 on")
            tell(procs[0])
        code, out, err = finish(procs[0], timeout=30)
    finally:
        end_all(procs, daemon)
    match = RAISED.search(out)
    assert code == 0 and match, f"rank 0 exited {code}:\n{out}\n{err}"
    return Outcome(match[1], match[2] == "True", match[3], match[4], victim_code,
                   victim_stderr, daemon.log())


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_rank_that_raises_between_collectives_is_lost_for_one_waiting_on_it(
        tmp_path: Path, path: str) -> None:
    got = end_rank_1(tmp_path, "raise", path)

    assert (got.kind, got.named) == ("PeerLostError", "1"), str(got)
    assert "rank 1" in got.message and "was lost" in got.message, got.message
    assert "ValueError (boom between collectives)" in got.message, got.message
    assert got.victim_code == 1 and "ValueError: boom" in got.victim_stderr, str(got)
    assert "rank 1 on" in got.daemon_log and "its program raised ValueError" in got.daemon_log


def test_a_rank_that_raised_is_lost_for_the_next_collective_of_the_others(
        tmp_path: Path) -> None:
    got = end_rank_1(tmp_path, "raise", when="after")

    # The group's sticky error, still a PeerLostError naming the rank and, through
    # the first failure, how it ended.
    assert (got.kind, got.peer_lost, got.named) == ("GroupBrokenByPeerLossError", True, "1")
    assert "ValueError (boom between collectives)" in got.message, got.message


@pytest.mark.parametrize("path", ["arena", "links"])
def test_a_rank_interrupted_by_sigint_between_collectives_is_lost_for_the_others(
        tmp_path: Path, path: str) -> None:
    got = end_rank_1(tmp_path, "sigint", path)

    assert (got.kind, got.named) == ("PeerLostError", "1"), str(got)
    assert "rank 1" in got.message, got.message
    assert "interrupted (KeyboardInterrupt: SIGINT or Ctrl-C)" in got.message, got.message
    assert got.victim_code == -signal.SIGINT and "KeyboardInterrupt" in got.victim_stderr, str(got)


def test_a_rank_that_destroyed_its_group_early_still_left_in_order(tmp_path: Path) -> None:
    got = end_rank_1(tmp_path, "destroy")

    assert got.kind == "MismatchError", str(got)
    assert "rank 1" in got.message and "left the job (destroy_process_group)" in got.message
    assert "different numbers of collectives" in got.message, got.message
    assert got.victim_code == 0, str(got)
    assert "was lost" not in got.daemon_log, got.daemon_log
