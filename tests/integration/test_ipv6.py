"""Jobs whose coordinator and ranks use IPv6 loopback (::1) from end to end.

The collective matrix runs over ::1 too (the "tcp6" run of tests/collectives);
here are the front doors: run_ranks, env:// with MASTER_ADDR=::1, a daemon on
--host ::1 joined at tcp://[::1]:PORT and asked for its status, and
asyncoll-run --master-addr ::1.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import numpy as np
import pytest

from asyncoll.testing import has_ipv6_loopback, run_ranks

from .conftest import WORKERS, Daemon, finish, start_probe
from .test_examples import JOB_TIMEOUT_S, TEST_TIMEOUT_S, clean_environment, launcher, start
from .test_examples import finish as finish_job


pytestmark = [pytest.mark.timeout(TEST_TIMEOUT_S),
              pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback (::1)")]


def _free_ipv6_port() -> int:
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("shm", ["0", "1"])
async def test_ranks_on_ipv6_loopback_advertise_it_and_reduce_over_it(shm, monkeypatch):
    monkeypatch.setenv("ASYNCOLL_SHM", shm)

    async def body(world):
        mesh = world.session.mesh
        peers = [mesh.peer_address(r) for r in range(world.size)]
        small = np.full(16, world.rank + 1, dtype=np.int64)  # direct links
        large = np.full(1 << 18, world.rank + 1, dtype=np.int64)  # the mesh
        await world.all_reduce(small)
        await world.all_reduce(large)
        return peers, int(small[0]), int(large[-1])

    for peers, small, large in await run_ranks(3, body, loopback="::1"):
        assert [host for host, _ in peers] == ["::1"] * 3
        assert (small, large) == (6, 6)


def test_env_rank_0_hosts_the_coordinator_at_an_ipv6_master_addr():
    env = {"MASTER_ADDR": "::1", "MASTER_PORT": str(_free_ipv6_port()), "WORLD_SIZE": "2"}
    ranks = [start_probe(env={**env, "RANK": str(rank)}) for rank in range(2)]
    outcomes = [finish(proc) for proc in ranks]
    assert [out for _, out, _ in outcomes] == ["OK rank=0 world=2 sum=[3, 30]\n",
                                               "OK rank=1 world=2 sum=[3, 30]\n"], outcomes
    assert [code for code, _, _ in outcomes] == [0, 0]


def test_daemon_on_ipv6_loopback_serves_a_job_and_its_status(tmp_path):
    daemon = Daemon(tmp_path, host="::1")
    try:
        assert daemon.address == f"[::1]:{daemon.port}"
        init = f"tcp://{daemon.address}"
        first = start_probe("--init", init, "--world-size", "2", "--rank", "0", "--job", "v6")
        daemon.wait_for_log("1 of 2 present")
        status = subprocess.run([sys.executable, "-m", "asyncoll", "status", "--coordinator",
                                 daemon.address, "--job", "v6"], capture_output=True,
                                text=True, timeout=60, check=False)
        second = start_probe("--init", init, "--world-size", "2", "--rank", "1", "--job", "v6")
        outcomes = [finish(first), finish(second)]
        assert status.returncode == 0, status.stderr
        # The waiting rank advertised ::1, and the table writes it as [::1]:port.
        assert "v6" in status.stdout and "[::1]:" in status.stdout, status.stdout
        assert [out for _, out, _ in outcomes] == ["OK rank=0 world=2 sum=[3, 30]\n",
                                                   "OK rank=1 world=2 sum=[3, 30]\n"], outcomes
        assert daemon.stop() == 0
        assert f"coordinator listening on [::1]:{daemon.port}" in daemon.log()
    finally:
        daemon.stop()


@pytest.mark.parametrize("how", [["--master-addr", "::1"], ["--master-addr", "[::1]"]])
def test_asyncoll_run_with_an_ipv6_master_addr_runs_an_all_reduce(how):
    proc = start([*launcher(), *how, "--nproc-per-node", "2",
                  str(WORKERS / "addresses.py")], clean_environment())
    stdout, stderr = finish_job(proc, JOB_TIMEOUT_S)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    lines = sorted(line for line in stdout.splitlines() if line.startswith("OK"))
    assert len(lines) == 2, stdout
    for rank, line in enumerate(lines):
        assert line.startswith(f"OK rank={rank} sum=[3, 30] coordinator=[::1]:"), line
        assert line.endswith(" master=::1"), line
