"""A coordinator that stalls (SIGSTOP, a VM pause, swap) judges its members fairly.

Issue 56: a daemon stopped for longer than the heartbeat deadline used to
declare every member of a running job lost as soon as it ran again, though
their heartbeats were waiting on its connections. Real processes against a
daemon: the job (workers/steady.py, or workers/survivor.py) runs with a 2 s
deadline while the daemon is stopped for three times that.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from .conftest import WORKERS, Daemon, end_all, finish, wait_ready
from .test_failures import outcomes, start_job

pytestmark = pytest.mark.timeout(180)

HEARTBEAT_S = 2.0
#: Three deadlines: without the fix, every member was lost at once on SIGCONT.
STALL_S = 3 * HEARTBEAT_S
#: What a slow, shared test machine may add to a deadline.
MARGIN_S = 2.0


def stall(daemon: Daemon, seconds: float,
          meanwhile: Callable[[], object] | None = None) -> float:
    """Stop ``daemon`` for ``seconds`` (calling ``meanwhile()`` 1 s in); when it resumed."""
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(1.0)
        if meanwhile is not None:
            meanwhile()
        time.sleep(seconds - 1.0)
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    return time.time()


def test_a_job_goes_on_unharmed_after_its_coordinator_is_stopped_for_three_deadlines(
        tmp_path):
    daemon = Daemon(tmp_path)
    stop_file = tmp_path / "stop"
    env = {**os.environ, "ASYNCOLL_HEARTBEAT_TIMEOUT": f"{HEARTBEAT_S:g}"}
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "steady.py"), daemon.address,
                               "3", "stalled", str(stop_file)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    try:
        wait_ready(procs)
        time.sleep(1.0)  # heartbeats flowing
        stall(daemon, STALL_S)
        # A wrong judgement came at once on SIGCONT; give it two deadlines to show.
        time.sleep(2 * HEARTBEAT_S)
        stop_file.touch()
        results = [finish(proc, timeout=60) for proc in procs]
    finally:
        end_all(procs, daemon)
    log = daemon.log()
    for code, out, err in results:
        # steady.py checks every all_reduce's result and exits non-zero on an error.
        assert code == 0 and re.search(r"DONE \d+", out), f"{code}\n{out}\n{err}\n{log}"
    assert "lost" not in log, log
    paused = re.findall(r"the coordinator did not run for (\d+\.\d) s", log)
    assert paused and float(paused[-1]) >= STALL_S - 0.1, log
    print(f"the daemon saw a pause of {paused[-1]} s; operations per rank: "
          f"{[out.split()[-1] for _, out, _ in results]}")
    assert "job 'stalled': every rank has left" in log, log


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_rank_gone_while_the_coordinator_was_stopped_is_lost_within_a_deadline(
        tmp_path, how):
    # Rank 1 is killed -9 (its connection closes) or stopped (its connection stays
    # open, silent) 1 s into the daemon's stall; the daemon must still find it within
    # one deadline of running again, and the others go on to fail naming it.
    daemon = Daemon(tmp_path)
    procs = start_job(daemon, 3, f"stall-{how}", 256,
                      env={"ASYNCOLL_HEARTBEAT_TIMEOUT": f"{HEARTBEAT_S:g}",
                           "ASYNCOLL_SHM": "0"})
    signal_to_send = signal.SIGKILL if how == "killed" else signal.SIGSTOP
    try:
        time.sleep(1.0)  # heartbeats flowing
        resumed_at = stall(daemon, STALL_S, lambda: procs[1].send_signal(signal_to_send))
        daemon.wait_for_log("rank 1 on", timeout=HEARTBEAT_S + MARGIN_S)
        found_after = time.time() - resumed_at
        got = outcomes(procs, 1)
    finally:
        end_all(procs, daemon)
    log = daemon.log()
    assert found_after < HEARTBEAT_S + MARGIN_S, (found_after, log)
    print(f"{how} rank 1 found {found_after:.2f} s after the daemon ran again")
    assert not re.search(r"rank [02] on \S+ \(pid \d+\) was lost", log), log
    hostname = socket.gethostname()
    notice = (rf"rank 1 on host {re.escape(hostname)} \(127\.0\.0\.1\) was lost: no "
              rf"heartbeat for \d+\.\d s \(the job allows 2 s\) \(the coordinator's notice\)")
    # A survivor that heard the notice first gives up and tells the other, whose
    # error may then be that word, naming rank 1 too, if it comes before the notice.
    relayed = (rf"rank 1 on host {re.escape(hostname)} was lost \(rank [02] gave up on "
               rf"operation #\d+ of group 0 \(over its direct links\) for it\)")
    for rank, (kind, named, failed_at, message) in got.items():
        assert kind == "PeerLostError" and named == 1, f"rank {rank}: {kind} {message}"
        if how == "frozen":
            # Only the coordinator can find a silent rank (it is reachable, so the
            # ranks' keepalive is off): its notice, first hand or relayed.
            assert failed_at - resumed_at < HEARTBEAT_S + MARGIN_S, (rank, failed_at, log)
            assert re.fullmatch(notice, message) or re.fullmatch(relayed, message), message
    if how == "frozen":
        assert any(re.fullmatch(notice, message) for *_, message in got.values()), got
    if how == "frozen":
        assert re.search(r"rank 1 on \S+ \(pid \d+\) was lost: no heartbeat for \d+\.\d s "
                         r"\(the job allows 2 s\); 2 of 3 ranks remain", log), log
    else:
        assert "was lost: disconnected without leaving; 2 of 3 ranks remain" in log, log
