"""A rank that waits says so within seconds, naming whom it waits for, where, and until
when (issue 59): for a coordinator that does not answer, and for ranks that have not
joined."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import time

import pytest

from .conftest import WORKERS, Daemon, free_port, stream_lines, start_probe

pytestmark = pytest.mark.timeout(90)

#: Where nothing listens, as a user's mistyped address: only root may listen on port 1.
DEAD = "127.0.0.1:1"


def first_line_with(proc: subprocess.Popen[str], text: str, within: float) -> tuple[str, float]:
    """The first stderr line of ``proc`` holding ``text``, read within ``within`` seconds of
    now, and how long it took; the process is ended afterwards."""
    assert proc.stderr is not None
    lines = stream_lines(proc.stderr)
    began = time.monotonic()
    seen: list[str] = []
    try:
        while True:
            left = began + within - time.monotonic()
            try:
                line = lines.get(timeout=max(0.01, left))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r} within {within} s: {seen}") from None
            if text in line:
                return line, time.monotonic() - began
            seen.append(line)
    finally:
        proc.terminate()  # asyncoll-run passes it on to its workers
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(20)


def test_a_rank_pointed_at_a_dead_address_says_so_within_10_s():
    proc = start_probe("--init", f"tcp://{DEAD}", "--world-size", "2", "--rank", "1",
                       "--timeout", "600")

    line, took = first_line_with(proc, "still waiting for", within=10.0)

    assert took < 10.0
    assert f"still waiting for the coordinator at {DEAD} after 3 s" in line
    assert "Connect call failed" in line or "refused" in line
    assert re.search(r"this rank gives up in 59\d s, at its join's timeout of 600 s", line)
    assert "init_process_group(timeout=...)" in line


def test_an_env_rank_with_no_rank_0_says_it_waits_for_rank_0_at_master_addr():
    port = free_port()
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
           "RANK": "1"}
    proc = start_probe("--timeout", "600", env=env)

    line, _ = first_line_with(proc, "still waiting for", within=10.0)

    assert (f"still waiting for rank 0 to host the coordinator (or for an "
            f"asyncoll-coordinator daemon) at 127.0.0.1:{port}") in line


def test_asyncoll_run_with_a_dead_coordinator_says_its_workers_wait_for_it():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "asyncoll.run", "--nproc-per-node", "1", "--coordinator",
         DEAD, str(WORKERS / "probe.py"), "--timeout", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    line, _ = first_line_with(launcher, "still waiting for", within=10.0)

    assert f"the coordinator that ASYNCOLL_COORDINATOR names at {DEAD}" in line


def test_one_rank_of_a_host_says_who_is_missing_with_the_deadline(daemon: Daemon):
    init = f"tcp://{daemon.address}"
    waiting = [start_probe("--init", init, "--world-size", "4", "--rank", str(r), "--job",
                           "quiet", "--timeout", "12") for r in (0, 1, 2)]
    outputs = [proc.communicate(timeout=60) for proc in waiting]

    # Each says it at 3 s and 9 s after it joined (the one that joined first, at 9 s at
    # the latest, once every one of them has joined); the rendezvous ends at 12 s.
    speakers = [err for _, err in outputs if "has not joined" in err]
    # The ranks wait on one host: one of them speaks for it.
    assert len(speakers) == 1, outputs
    assert "waiting for 1 of 4 ranks of job 'quiet': rank 3 has not joined" in speakers[0]
    assert f"(coordinator at {daemon.address}); this rank gives up in" in speakers[0]
    assert "at its join's timeout of 12 s" in speakers[0]
