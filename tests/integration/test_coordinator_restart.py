"""The coordinator restarted, moved or gone under a running job (issue 28).

Collectives never need the coordinator. What does (new_group,
monitored_barrier) waits while the members reach a coordinator again: a
restarted one on the same port, or the next address of
ASYNCOLL_COORDINATOR, takes the job back from their re-registrations. With
none reachable, the request fails in its own timeout, naming the
addresses tried.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import WORKERS, Daemon, finish, free_port

pytestmark = pytest.mark.timeout(120)


def run_workers(addresses: str, go: Path, count: int = 2, *extra: str) -> list:
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "restart.py"), addresses,
                               str(count), "restarted", str(go), *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(count)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    return procs


def stop_all(procs: list, *daemons: Daemon | None) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for daemon in daemons:
        if daemon is not None:
            daemon.stop()


def assert_made_a_group(outcomes: list, coordinator: str) -> None:
    """Every worker ended well, having made a group through ``coordinator``."""
    for code, out, err in outcomes:
        assert code == 0, f"{out}\n{err}"
        assert "DONE" in out and "GROUP created" in out, out
        assert f"re-registered with the coordinator at {coordinator}" in err, err


def test_a_restarted_coordinator_takes_the_job_back_and_new_group_works(tmp_path):
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = Daemon(tmp_path / "first")
    second = None
    go = tmp_path / "go"
    procs = run_workers(first.address, go)
    try:
        first.stop(signal.SIGKILL)
        time.sleep(0.5)  # the workers go on reducing without it
        second = Daemon(tmp_path / "second", "--port", str(first.port))  # the restart
        second.wait_for_log("adopted job 'restarted': 2 members, generation 0")
        go.touch()
        outcomes = [finish(proc, timeout=60) for proc in procs]
    finally:
        stop_all(procs, first, second)
    assert_made_a_group(outcomes, second.address)


def test_members_move_to_the_next_coordinator_address(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = Daemon(tmp_path / "a")
    b = Daemon(tmp_path / "b")
    go = tmp_path / "go"
    procs = run_workers(f"{a.address},{b.address}", go, 3)
    try:
        a.stop(signal.SIGKILL)  # for good
        b.wait_for_log("adopted job 'restarted': 3 members, generation 0")
        go.touch()
        outcomes = [finish(proc, timeout=60) for proc in procs]
    finally:
        stop_all(procs, a, b)
    assert_made_a_group(outcomes, b.address)


def test_with_no_coordinator_new_group_fails_in_its_own_timeout(tmp_path):
    daemon = Daemon(tmp_path)
    spare = f"127.0.0.1:{free_port()}"  # nothing listens there
    go = tmp_path / "go"
    procs = run_workers(f"{daemon.address},{spare}", go, 2, "3")
    try:
        daemon.stop(signal.SIGKILL)
        go.touch()
        outcomes = [finish(proc, timeout=60) for proc in procs]
    finally:
        stop_all(procs, daemon)
    for code, out, err in outcomes:
        assert code == 0, f"{out}\n{err}"
        line = next(line for line in out.splitlines() if line.startswith("GROUP"))
        assert line.startswith("GROUP RendezvousTimeoutError"), line
        seconds = float(line.split()[2].rstrip(":"))
        assert 3.0 <= seconds < 30.0, line  # its own deadline, not a hang
        assert "no coordinator reachable within" in line
        assert f"(tried {daemon.address}, {spare})" in line
