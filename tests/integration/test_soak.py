"""100 000 small all_reduces: memory, connections and tasks stay flat (slow-marked)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import WORKERS, Daemon, finish

OPERATIONS = 100_000
WARMUP = 10_000


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_hundred_thousand_small_all_reduces_keep_memory_fds_and_tasks_flat(tmp_path):
    daemon = Daemon(tmp_path)
    try:
        procs = [subprocess.Popen([sys.executable, str(WORKERS / "soak.py"), daemon.address,
                                   "2", "soak", str(OPERATIONS), str(WARMUP)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        results = [finish(proc, timeout=800) for proc in procs]
    finally:
        daemon.stop()
    for code, out, err in results:
        assert code == 0, f"{out}\n{err}"
        samples = [tuple(map(int, m)) for m in
                   re.findall(r"SAMPLE (\d+) (\d+) (\d+) (\d+)", out)]
        (_, rss_warm, fds_warm, tasks_warm), (_, rss_end, fds_end, tasks_end) = samples
        print(f"RSS {rss_warm} -> {rss_end} KiB, fds {fds_warm} -> {fds_end}, "
              f"tasks {tasks_warm} -> {tasks_end}")
        assert rss_end <= rss_warm * 1.05, f"resident memory grew {rss_warm} -> {rss_end} KiB"
        assert fds_end <= fds_warm, f"open files grew {fds_warm} -> {fds_end}"
        assert tasks_end <= tasks_warm, f"tasks grew {tasks_warm} -> {tasks_end}"
