"""Elastic jobs across real processes: survivors go on after a kill -9, newcomers join.

examples/elastic_training.py runs under ``asyncoll-run --max-restarts 1``:
4 workers train, one is killed with SIGKILL mid-training, the 3 survivors
reconfigure and go on, asyncoll-run's replacement is admitted, and the job
ends with 4 workers holding identical weights. workers/elastic.py covers
what the launcher does not: newcomers arriving together, the size bound,
and a pending process that gives up.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .conftest import WORKERS, Daemon, finish

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"\[pid (\d+)\] rank (\d+) of 4 training")
DONE = re.compile(r"rank (\d+) of (\d+) done at step (\d+): weights (\w+)")


def lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's output, line by line, as it comes (a reader thread)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_survivors_of_a_kill_9_go_on_and_a_replacement_joins_with_identical_weights():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "asyncoll.run", "--nproc-per-node", "4", "--max-restarts", "1",
         str(REPO / "examples" / "elastic_training.py"), "--steps", "600", "--size", "50000"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = lines_of(launcher)
        seen: list[str] = []
        pids: dict[int, int] = {}
        while len(pids) < 4:
            line = lines.get(timeout=60)
            seen.append(line)
            started = STARTED.search(line)
            if started:
                pids[int(started[2])] = int(started[1])
        time.sleep(0.5)  # well inside the training
        os.kill(pids[2], signal.SIGKILL)
        code = launcher.wait(timeout=180)
        while not lines.empty() or launcher.stdout and not launcher.stdout.closed:
            try:
                seen.append(lines.get(timeout=2))
            except queue.Empty:
                break
    finally:
        if launcher.poll() is None:
            launcher.kill()
    output = "".join(seen)
    assert code == 0, output
    assert output.count("world 4 -> 3") == 3, output  # every survivor went on
    assert "was killed by SIGKILL; started pid" in output, output
    assert len(re.findall(r"joined as rank 3 of 4", output)) == 1, output
    assert output.count("world 3 -> 4") == 3, output
    done = DONE.findall(output)
    assert sorted(int(rank) for rank, *_ in done) == [0, 1, 2, 3], output
    assert {(size, step) for _, size, step, _ in done} == {("4", "600")}, output
    assert len({digest for *_, digest in done}) == 1, output  # identical weights


def start(daemon: Daemon, job: str, role: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKERS / "elastic.py"), daemon.address, job,
                             role, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def ready_members(daemon: Daemon, job: str) -> list[subprocess.Popen[str]]:
    """The job's two members, joined (each said READY)."""
    members = [start(daemon, job, "member") for _ in range(2)]
    for proc in members:
        assert proc.stdout is not None and proc.stdout.readline().startswith("READY")
    return members


def tell(procs: list[subprocess.Popen[str]], command: str) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(f"{command}\n")
        proc.stdin.flush()


def test_newcomers_arriving_together_join_in_one_reconfigure_and_max_size_refuses_more(
        tmp_path):
    daemon = Daemon(tmp_path)
    try:
        members = ready_members(daemon, "together")
        newcomers = [start(daemon, "together", "newcomer") for _ in range(2)]
        daemon.wait_for_log("2 pending")
        extra = start(daemon, "together", "newcomer")  # max_size is 4
        code, out, err = finish(extra, timeout=60)
        assert code == 3 and "max_size of 4" in out, (out, err)
        tell(members, "go")
        results = [finish(proc, timeout=60) for proc in members + newcomers]
        assert all(code == 0 for code, _, _ in results), results
        reports = [re.search(r"RANK (\d+) SIZE 4 SUM ([\d.]+)", out) for _, out, _ in results]
        assert all(reports), results
        # Members keep ranks 0 and 1; the newcomers follow; 1 + 2 + 3 + 4 everywhere.
        assert sorted(int(r[1]) for r in reports if r) == [0, 1, 2, 3], results
        assert {int(r[1]) for r in reports[:2] if r} == {0, 1}, results
        assert {r[2] for r in reports if r} == {"10.0"}, results
    finally:
        daemon.stop()


def test_a_pending_process_that_gives_up_leaves_no_trace(tmp_path):
    daemon = Daemon(tmp_path)
    try:
        members = ready_members(daemon, "patience")
        quitter = start(daemon, "patience", "newcomer", "1")  # a 1 s timeout
        code, out, err = finish(quitter, timeout=60)
        assert code == 4 and "RendezvousTimeoutError" in out, (out, err)
        tell(members, "check")
        results = [finish(proc, timeout=60) for proc in members]
        assert all(code == 0 and "CHANGED False SIZE 2" in out for code, out, _ in results), \
            results
    finally:
        daemon.stop()
