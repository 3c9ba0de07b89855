"""What ranks wait for, from a live job's heartbeats: stragglers and stuck ranks (issue 29).

A rank that sleeps 50 ms before every 5th all_reduce is its group's
straggler for ``asyncoll status --stragglers`` and get_straggler_report();
the same job without it has none. A rank that skipped an all_reduce which
the others wait in is named by ``asyncoll status``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from .conftest import WORKERS, Daemon

pytestmark = pytest.mark.timeout(120)


def start(daemon: Daemon, job: str, mode: str, count: int) -> list[subprocess.Popen[str]]:
    env = dict(os.environ, ASYNCOLL_HEARTBEAT_TIMEOUT="2")  # a heartbeat each 0.5 s
    return [subprocess.Popen([sys.executable, str(WORKERS / "straggler.py"), daemon.address,
                              "3", str(rank), job, mode, str(count)], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for rank in range(3)]


def status(daemon: Daemon, *extra: str) -> str:
    done = subprocess.run([sys.executable, "-m", "asyncoll", "status", "--coordinator",
                           daemon.address, *extra], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def until(daemon: Daemon, text: str, *extra: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        shown = status(daemon, *extra)
        if text in shown or time.monotonic() > deadline:
            return shown
        time.sleep(0.3)


def end(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None and proc.stdin is not None:
            try:
                proc.stdin.write("GO\n")
                proc.stdin.flush()
            except OSError:
                pass
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.parametrize("sleeper", [1, None], ids=["rank 1 sleeps", "nobody sleeps"])
def test_the_rank_that_sleeps_before_every_5th_all_reduce_is_the_straggler(daemon, sleeper):
    job = f"strag-{sleeper}"
    procs = start(daemon, job, f"sleep:{sleeper}" if sleeper is not None else "none", 600)
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "DONE"
        time.sleep(1.5)  # the last heartbeats' samples
        shown = until(daemon, "arrived last", "--stragglers", "--job", job, timeout=5.0)
        assert procs[0].stdin is not None and procs[0].stdout is not None
        procs[0].stdin.write("REPORT\n")
        procs[0].stdin.flush()
        reported = [procs[0].stdout.readline().strip() for _ in range(2 if sleeper else 1)]
    finally:
        end(procs)
    assert reported[-1] == "REPORTED", reported
    if sleeper is None:
        assert shown.strip() == f"job {job}: no straggler", shown
    else:
        (line,) = shown.strip().splitlines()
        assert line.startswith(f"job {job}: rank 1 arrived last in "), shown
        assert "sampled operations of group 0, a median of " in line
        late_ms = float(line.split("a median of ")[1].split()[0])
        # Rank 1 sleeps 50 ms before the operations it is late for: that is a floor (less
        # the ranks' start from the operation before). How much later a busy machine
        # makes it has no ceiling; the median's arithmetic, on a fake clock, is
        # tests/unit/test_stragglers.py's.
        assert late_ms >= 40, line
        assert reported[0].startswith("STRAGGLER group 0 rank 1 last "), reported


def test_status_names_the_rank_the_others_wait_for(daemon):
    procs = start(daemon, "stuck", "skip:2", 20)
    try:
        assert procs[2].stdout is not None and procs[2].stdout.readline().strip() == "DONE"
        shown = until(daemon, "! job stuck:", timeout=30.0)
    finally:
        for proc in procs[:2]:
            proc.kill()
        end(procs)
    line = next(line for line in shown.splitlines() if line.startswith("! job stuck:"))
    assert line.startswith("! job stuck: rank 2 is at all_reduce #"), shown
    assert " of group 0; ranks 0, 1 wait in #" in line and line.endswith(" s"), line
    behind = int(line.split("all_reduce #")[1].split()[0])
    waiting = int(line.split("wait in #")[1].split()[0])
    assert waiting == behind + 1, line
