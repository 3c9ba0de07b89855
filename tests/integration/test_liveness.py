"""Liveness without the coordinator: a frozen rank is found over the data connections.

Real processes (workers/liveness.py) against a standalone coordinator daemon.
The test kills the daemon with SIGKILL (no restart, no standby), then
freezes a rank with SIGSTOP: the other ranks must fail with PeerLostError
naming it within the heartbeat deadline, on each path a group may take on
one host (its shared-memory arena, its direct links, the event loop's mesh).
A rank that is merely late (computing, its event loop still running) must
not be declared lost; and a collective that times out names the rank it
waited for, in torch's words.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import WORKERS, Daemon, finish

pytestmark = pytest.mark.timeout(120)

#: Each path's environment and the elements of its all_reduces.
PATHS = {"arena": ({}, 256),
         "links": ({"ASYNCOLL_SHM": "0"}, 256),
         "mesh": ({"ASYNCOLL_ARENA_BYTES": "0", "ASYNCOLL_LINKS_BYTES": "0"}, 100_000)}
HEARTBEAT = 2.0
FAILED = re.compile(r"FAILED (\w+) rank=(-?\d+) at=([\d.]+) waiting_for=([\d,]*) (.*)")


def start_job(tmp_path: Path, daemon: Daemon, path: str, timeout: float, mode: str,
              heartbeat: float, *extra: str) -> list[subprocess.Popen[str]]:
    env, elements = PATHS[path]
    env = {**os.environ, **env, "ASYNCOLL_HEARTBEAT_TIMEOUT": str(heartbeat)}
    procs = []
    for rank in range(3):
        with open(tmp_path / f"rank{rank}.err", "w") as stderr:  # the child keeps its own
            procs.append(subprocess.Popen(
                [sys.executable, str(WORKERS / "liveness.py"), daemon.address, "3", str(rank),
                 f"liveness-{path}-{mode}", str(elements), str(timeout), mode, *extra],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                text=True))
    for rank, proc in enumerate(procs):
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded: the test's own timeout
        assert line.strip() == "READY", (line, errors(tmp_path, rank))
    return procs


def errors(tmp_path: Path, rank: int) -> str:
    return (tmp_path / f"rank{rank}.err").read_text(errors="replace")


def go(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("GO\n")
        proc.stdin.flush()


def reports(procs: list[subprocess.Popen[str]], ranks: list[int]) -> dict[int, str]:
    """Each of ``ranks``' report line, read before any is let go (its stdin closed)."""
    lines = {}
    for rank in ranks:
        assert procs[rank].stdout is not None
        lines[rank] = procs[rank].stdout.readline()  # bounded: the test's own timeout
    for rank in ranks:
        code, out, _ = finish(procs[rank], timeout=30)
        assert code == 0, f"rank {rank} exited {code}:\n{lines[rank]}{out}"
    return lines


def stop_all(procs: list[subprocess.Popen[str]], daemon: Daemon) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    daemon.stop()


def kill_coordinator(daemon: Daemon, tmp_path: Path) -> None:
    """Kill the coordinator; return once every rank has read the end of its connection
    (each says, on its stderr, that it reaches for a coordinator again)."""
    daemon.stop(signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not all("reaching a coordinator again" in errors(tmp_path, rank)
                  for rank in range(3)):
        assert time.monotonic() < deadline, [errors(tmp_path, rank) for rank in range(3)]
        time.sleep(0.02)


def freeze_rank_1(tmp_path: Path, path: str, timeout: float, heartbeat: float,
                  without_coordinator: bool) -> tuple[float, dict[int, re.Match[str]]]:
    """Stop rank 1 with SIGSTOP amid all_reduces (the coordinator killed first, or not):
    (when it was stopped, each survivor's FAILED line matched)."""
    daemon = Daemon(tmp_path)
    procs = start_job(tmp_path, daemon, path, timeout, "until_failure", heartbeat)
    try:
        if without_coordinator:
            kill_coordinator(daemon, tmp_path)
        go(procs)
        for proc in procs:  # well inside the all_reduces: each one ran one of them
            assert proc.stdout is not None
            assert proc.stdout.readline() == "LOOPING\n"
        stopped_at = time.time()
        procs[1].send_signal(signal.SIGSTOP)  # alive, sockets open, silent
        lines = reports(procs, [0, 2])
    finally:
        stop_all(procs, daemon)
    matches = {}
    for rank, line in lines.items():
        match = FAILED.search(line)
        assert match, (rank, line, errors(tmp_path, rank))
        matches[rank] = match
    return stopped_at, matches


@pytest.mark.parametrize("path", list(PATHS))
def test_a_frozen_rank_is_lost_within_the_heartbeat_deadline_without_a_coordinator(
        tmp_path, path):
    stopped_at, matches = freeze_rank_1(tmp_path, path, 60.0, HEARTBEAT, True)
    for rank, match in matches.items():
        kind, named, failed_at, message = match[1], int(match[2]), float(match[3]), match[5]
        assert kind == "PeerLostError" and named == 1, (rank, match[0])
        assert "rank 1 on host" in message, (rank, match[0])
        # Within the deadline (its clock starts at the first keepalive), plus a margin.
        assert failed_at - stopped_at < HEARTBEAT + 2.0, (rank, failed_at - stopped_at,
                                                          match[0])


@pytest.mark.parametrize("path", list(PATHS))
def test_a_late_rank_whose_loop_runs_is_not_lost_without_a_coordinator(tmp_path, path):
    late = 3 * HEARTBEAT
    daemon = Daemon(tmp_path)
    procs = start_job(tmp_path, daemon, path, 60.0, "late", HEARTBEAT, str(late))
    try:
        kill_coordinator(daemon, tmp_path)
        go(procs)
        lines = reports(procs, [0, 1, 2])
    finally:
        stop_all(procs, daemon)
    for rank, line in lines.items():
        assert line.startswith("OK sums=[6.0, 6.0, 6.0]"), (rank, line, errors(tmp_path, rank))
    # Every rank waited for the late one: on the clock all ranks share, none
    # finished before rank 1 stopped spinning (each rank's own start differs by
    # when it read "GO", so a per-rank duration cannot say this).
    spun_until = float(re.search(r"spun_until=([\d.]+)", lines[1])[1])
    for rank, line in lines.items():
        assert float(re.search(r"done=([\d.]+)", line)[1]) >= spun_until, (rank, lines)


@pytest.mark.parametrize("path", list(PATHS))
def test_a_collective_timeout_names_the_rank_it_waited_for_in_torchs_words(tmp_path, path):
    # The coordinator runs, with a heartbeat deadline far beyond the operation's.
    _, matches = freeze_rank_1(tmp_path, path, 3.0, 60.0, False)
    for rank, match in matches.items():
        kind, waiting_for, message = match[1], match[4], match[5]
        assert kind == "CollectiveTimeoutError", (rank, match[0])
        # Each names whom it waits for itself, as torch's words do: rank 1, or, where the
        # algorithm has it wait on the other survivor (itself stuck on rank 1), that one.
        other = ({0, 2} - {rank}).pop()
        named = set(waiting_for.split(","))
        assert named and named <= {"1", str(other)}, (rank, match[0])
        assert all(f"rank {r}" in message for r in named), (rank, match[0])
        assert message.rstrip().endswith("Timed out waiting 3000ms"), (rank, match[0])
    # And at least one survivor waits on rank 1 itself.
    assert any("1" in match[4].split(",") for match in matches.values()), [
        m[0] for m in matches.values()]
