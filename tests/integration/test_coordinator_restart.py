"""The coordinator restarted under a running job: collectives go on, the rest says why.

Peers do not re-register with the new daemon: it would know none of the
job's groups, and ranks cannot agree on new ones without a coordinator that
saw them all. So operations that need the coordinator (new_group,
monitored_barrier) raise RendezvousError saying so, and the rest goes on.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from .conftest import WORKERS, Daemon, finish

pytestmark = pytest.mark.timeout(120)


def test_job_keeps_reducing_across_a_coordinator_restart_and_new_group_says_why(tmp_path):
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = Daemon(tmp_path / "first")
    second = None
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "restart.py"), first.address, "2",
                               "restarted", str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        first.stop()
        time.sleep(0.5)  # the workers go on reducing without it
        second = Daemon(tmp_path / "second", "--port", str(first.port))  # the restart
        go.touch()
        outcomes = [finish(proc, timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        first.stop()
        if second is not None:
            second.stop()
    for code, out, err in outcomes:
        assert code == 0, f"{out}\n{err}"
        assert "DONE" in out
        assert "GROUP RendezvousError: new_group needs the coordinator" in out, out
        assert "collectives on existing groups keep working" in out
        assert "lost the connection" in err or "closed the connection" in err, err
