"""Jobs, groups and generations give back their shared memory, fds and threads, on every rank.

Two real processes (workers/cycles.py) make and end 200 jobs, 200 groups or
200 generations of an elastic job, with the garbage collector off, running
collectives through each one's arena and rings; afterwards each process
holds the same asyncoll mappings and fds in /proc/self/maps and
/proc/self/fd, threads and open files as before the first.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from asyncoll._transport.shm import arena

from .conftest import WORKERS, Daemon, finish

CYCLES = 200

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(not arena.supported(),
                                 reason="the arena needs POSIX shared memory on x86-64")]


def run(tmp_path, mode: str) -> list[dict[str, list[tuple[int, ...]]]]:
    """Run both ranks of ``mode``; return each one's HELD and DURING lines, as numbers."""
    daemon = Daemon(tmp_path)
    try:
        procs = [subprocess.Popen([sys.executable, str(WORKERS / "cycles.py"), daemon.address,
                                   f"giving-back-{mode}", mode, str(CYCLES)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        results = [finish(proc, timeout=200) for proc in procs]
    finally:
        daemon.stop()
    lines = []
    for code, out, err in results:
        assert code == 0, f"exit {code}\n{out}\n{err}"
        lines.append({kind: [tuple(map(int, found.split())) for found in
                             re.findall(rf"^{kind} ([\d ]+)$", out, re.MULTILINE)]
                      for kind in ("HELD", "DURING")})
    return lines


def test_two_hundred_jobs_in_a_row_leave_no_shared_memory_fds_or_threads_on_either_rank(
        tmp_path):
    for rank in run(tmp_path, "jobs"):
        (_, *before), (_, *first), (done, *end) = rank["HELD"]
        during = rank["DURING"][0]
        assert before[:2] == [0, 0]
        # The world's arena and a ring were mapped while the first job ran.
        assert during[0] >= 2 and during[1] >= 2, during
        assert done == CYCLES
        # No asyncoll mapping or fd left; threads and files as after the first job
        # (the runtime's loop thread stays for the next).
        assert end == first and end[:2] == [0, 0], (first, end)


def test_two_hundred_groups_made_and_destroyed_give_back_each_arena_and_thread_on_both_ranks(
        tmp_path):
    for rank in run(tmp_path, "groups"):
        (_, *before), (done, *end) = rank["HELD"]
        during = rank["DURING"][0]
        assert before[0] >= 1, before  # the world's own arena
        assert during[0] > before[0], (before, during)  # and the new group's
        assert done == CYCLES
        assert end == before, (before, end)


def test_two_hundred_reconfigures_give_back_each_generations_arena_and_rings_on_both_ranks(
        tmp_path):
    for rank in run(tmp_path, "reconfigures"):
        (_, *before), (done, *end) = rank["HELD"]
        during = rank["DURING"][0]
        assert before[0] >= 1 and during[0] >= 1, (before, during)
        assert done == CYCLES
        assert end == before, (before, end)
