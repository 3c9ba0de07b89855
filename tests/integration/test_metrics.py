"""asyncoll-coordinator --metrics-port: Prometheus metrics scraped during a job (issue 29)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .conftest import WORKERS, Daemon, finish

pytest.importorskip("prometheus_client")
pytestmark = pytest.mark.timeout(120)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        return str(reply.read().decode())


def value(text: str, name: str, **labels: str) -> float:
    """The value of the sample ``name{labels}`` in the exposition ``text``."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{name}{{{re.escape(wanted)}}} (\S+)$" if labels else rf"^{name} (\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"no {name}{{{wanted}}} in:\n{text}"
    return float(match.group(1))


def test_metrics_show_the_jobs_members_and_its_operation_rate(tmp_path: Path):
    daemon = Daemon(tmp_path, "--metrics-port", "0", "--metrics-port-file",
                    str(tmp_path / "metrics.port"))
    port = int((tmp_path / "metrics.port").read_text())
    stop = tmp_path / "stop"
    env = dict(os.environ, ASYNCOLL_HEARTBEAT_TIMEOUT="1")  # a heartbeat each 0.25 s
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "reducing.py"), daemon.address, "2",
                               "m", str(stop)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + 30
        while True:
            text = scrape(port)
            rate = re.search(r'^asyncoll_job_operations_per_second\{job="m"\} (\S+)$', text,
                             re.MULTILINE)
            if rate and float(rate.group(1)) > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        stop.touch()
        outcomes = [finish(proc, timeout=60) for proc in procs]
        after = scrape(port)
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        daemon.stop()
    assert all(code == 0 for code, _, _ in outcomes), outcomes
    assert value(text, "asyncoll_members", job="m", state="running") == 2
    assert value(text, "asyncoll_jobs", state="running") == 1
    assert value(text, "asyncoll_job_operations_per_second", job="m") > 0, text
    assert value(text, "asyncoll_job_operations", job="m") > 0
    assert value(text, "asyncoll_heartbeats_total") > 0
    assert value(text, "asyncoll_rendezvous_seconds_count") == 1
    assert value(after, "asyncoll_jobs", state="running") == 0  # the job ended
    assert value(after, "asyncoll_members_lost_total") == 0
    assert value(after, "asyncoll_stalls_total") >= 0  # exported; a loaded machine may stall
