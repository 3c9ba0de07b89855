"""Elastic jobs across real processes: survivors go on after a kill -9, newcomers join.

examples/elastic_training.py (numpy, 4 workers) and its torch DDP form,
examples/elastic_ddp.py (3 workers), run under ``asyncoll-run --max-restarts 1``: one
worker is killed with SIGKILL mid-training, the survivors reconfigure and go
on, asyncoll-run's replacement is admitted, and the job ends with all its
workers holding identical weights. workers/elastic.py covers what the
launcher does not: newcomers arriving together, the size bound, a pending
process that gives up, a second member killed during the agreement, a late
member excluded, and a job below its min_size."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import WORKERS, Daemon, finish, stream_lines

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
DONE = re.compile(r"rank (\d+) of (\d+) done at step (\d+): weights (\w+)")
FIRST_STEP = re.compile(r"first step in a world of (\d+) done at ([\d.]+)")


def lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's output, line by line, as it comes (a reader thread)."""
    assert proc.stdout is not None
    return stream_lines(proc.stdout)


def run_and_kill_one(example: str, nproc: int, *args: str) -> tuple[str, float]:
    """Run ``example`` under ``asyncoll-run --max-restarts 1``; kill -9 its last rank.

    The kill comes once every worker completed a step, well inside the training.
    Returns the launcher's output and the moment of the kill (Unix time).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONFAULTHANDLER"] = "1"  # a worker that crashes shows where
    started = re.compile(rf"\[pid (\d+)\] rank (\d+) of {nproc} training")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "asyncoll.run", "--nproc-per-node", str(nproc),
         "--max-restarts", "1", str(REPO / "examples" / example), *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = lines_of(launcher)
        seen: list[str] = []
        pids: dict[int, int] = {}
        trained = 0  # workers that completed a step in the first world
        while len(pids) < nproc or trained < nproc:
            try:
                line = lines.get(timeout=90)
            except queue.Empty:
                raise AssertionError("".join(seen)) from None
            seen.append(line)
            # Workers share the launcher's output: two lines may come as one.
            pids.update((int(rank), int(pid)) for pid, rank in started.findall(line))
            trained += sum(int(n) == nproc for n, _ in FIRST_STEP.findall(line))
        killed_at = time.time()
        os.kill(pids[nproc - 1], signal.SIGKILL)
        code = launcher.wait(timeout=180)
        while True:
            try:
                seen.append(lines.get(timeout=2))
            except queue.Empty:
                break
    finally:
        if launcher.poll() is None:
            launcher.kill()
    output = "".join(seen)
    assert code == 0, output
    return output, killed_at


def assert_went_on_and_ended_together(output: str, nproc: int, steps: int) -> None:
    """Every survivor went on, the replacement joined, and all ended with the same weights."""
    assert output.count(f"world {nproc} -> {nproc - 1}") == nproc - 1, output
    assert "was killed by SIGKILL; started pid" in output, output
    assert len(re.findall(rf"joined as rank {nproc - 1} of {nproc}", output)) == 1, output
    assert output.count(f"world {nproc - 1} -> {nproc}") == nproc - 1, output
    done = DONE.findall(output)
    assert sorted(int(rank) for rank, *_ in done) == list(range(nproc)), output
    assert {(size, step) for _, size, step, _ in done} == {(str(nproc), str(steps))}, output
    assert len({digest for *_, digest in done}) == 1, output  # identical weights


def pause_after(output: str, killed_at: float, size: int) -> float:
    """Seconds from the kill until every survivor completed a step in the world of ``size``."""
    firsts = [float(t) for n, t in FIRST_STEP.findall(output)
              if int(n) == size and float(t) > killed_at]
    assert len(firsts) == size, output
    return max(firsts) - killed_at


def test_survivors_of_a_kill_9_go_on_and_a_replacement_joins_with_identical_weights():
    output, killed_at = run_and_kill_one("elastic_training.py", 4, "--steps", "600",
                                         "--size", "50000")
    assert_went_on_and_ended_together(output, 4, 600)
    print(f"kill -9 to a step completed by all 3 survivors: "
          f"{pause_after(output, killed_at, 3):.2f} s")


def test_torch_ddp_goes_on_after_a_kill_9_in_the_same_processes():
    """examples/elastic_ddp.py: torch's group is made again over the new world."""
    pytest.importorskip("torch")
    output, killed_at = run_and_kill_one("elastic_ddp.py", 3, "--steps", "300")
    assert_went_on_and_ended_together(output, 3, 300)
    print(f"kill -9 to a DDP step completed by both survivors: "
          f"{pause_after(output, killed_at, 2):.2f} s")


def start(daemon: Daemon, job: str, role: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKERS / "elastic.py"), daemon.address, job,
                             role, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def ready_members(daemon: Daemon, job: str, size: int = 2,
                  *extra: str) -> list[subprocess.Popen[str]]:
    """The job's members, joined (each said READY), in rank order."""
    members = [start(daemon, job, "member", "--size", str(size), *extra) for _ in range(size)]
    ranks = {}
    for proc in members:
        assert proc.stdout is not None
        ready = re.match(r"READY RANK (\d+)", proc.stdout.readline())
        assert ready, finish(proc)
        ranks[int(ready[1])] = proc
    return [ranks[rank] for rank in range(size)]


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
        quitter = start(daemon, "patience", "newcomer", "--timeout", "1")
        code, out, err = finish(quitter, timeout=60)
        assert code == 4 and "RendezvousTimeoutError" in out, (out, err)
        tell(members, "check")
        results = [finish(proc, timeout=60) for proc in members]
        assert all(code == 0 and "CHANGED False SIZE 2" in out for code, out, _ in results), \
            results
    finally:
        daemon.stop()


def killed(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(10)


def test_a_second_member_killed_during_reconfigure_is_left_out_and_the_rest_go_on(tmp_path):
    daemon = Daemon(tmp_path)
    try:
        members = ready_members(daemon, "second", 4)
        killed(members[3])
        daemon.wait_for_log("3 of 4 ranks remain")
        tell(members[:2], "reconfigure 60")
        daemon.wait_for_log("(2 of 3 live members)")  # both wait in the agreement
        killed(members[2])
        results = [finish(proc, timeout=60) for proc in members[:2]]
        assert [(code, out.strip()) for code, out, _ in results] == [
            (0, "RANK 0 SIZE 2 SUM 3.0"), (0, "RANK 1 SIZE 2 SUM 3.0")], results
        assert "generation 1: 2 members (ranks 2, 3 of generation 0 gone)" in daemon.log()
    finally:
        daemon.stop()


def test_a_member_that_does_not_reconfigure_in_time_is_excluded_with_a_clear_error(tmp_path):
    daemon = Daemon(tmp_path)
    try:
        members = ready_members(daemon, "late", 3)
        tell(members[:2], "reconfigure 2")  # the third is busy elsewhere
        results = [finish(proc, timeout=60) for proc in members[:2]]
        assert [(code, out.strip()) for code, out, _ in results] == [
            (0, "RANK 0 SIZE 2 SUM 3.0"), (0, "RANK 1 SIZE 2 SUM 3.0")], results
        tell(members[2:], "sum")  # its next call, a collective
        code, out, err = finish(members[2], timeout=60)
        assert code == 5, (out, err)
        assert out.startswith("ExcludedError:") and "did not call reconfigure() within 2 s" \
            in out, (out, err)
    finally:
        daemon.stop()


def left_alone_below_min_size(daemon: Daemon, job: str) -> list[subprocess.Popen[str]]:
    """A job of 2 with min_size 2 whose rank 1 was killed: rank 0 is left alone."""
    members = ready_members(daemon, job, 2, "--min-size", "2")
    killed(members[1])
    daemon.wait_for_log("1 of 2 ranks remain")
    return members


def test_below_min_size_reconfigure_waits_for_a_newcomer_then_goes_on(tmp_path):
    daemon = Daemon(tmp_path)
    try:
        members = left_alone_below_min_size(daemon, "minimum")
        tell(members[:1], "reconfigure 60")
        daemon.wait_for_log("(1 of 1 live members)")  # waiting: 1 is below min_size
        newcomer = start(daemon, "minimum", "newcomer")
        results = [finish(proc, timeout=60) for proc in (members[0], newcomer)]
        assert [(code, out.strip()) for code, out, _ in results] == [
            (0, "RANK 0 SIZE 2 SUM 3.0"), (0, "RANK 1 SIZE 2 SUM 3.0")], results
    finally:
        daemon.stop()


def test_below_min_size_reconfigure_fails_clearly_at_its_deadline(tmp_path):
    daemon = Daemon(tmp_path)
    try:
        members = left_alone_below_min_size(daemon, "alone")
        tell(members[:1], "reconfigure 1")
        code, out, err = finish(members[0], timeout=60)
        assert code == 4, (out, err)
        assert out.startswith("RendezvousTimeoutError:") and "below the job's min_size of 2" \
            in out, (out, err)
    finally:
        daemon.stop()
