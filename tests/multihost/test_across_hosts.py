"""Jobs across separate hosts: network namespaces on one private bridge.

Each host is a Linux network namespace with its own address (netns-cluster.sh,
adapted from ../shared/tools). The coordinator runs on host 0 and the
workers on hosts 1-3, started with the multi-node launcher, so every byte
crosses a (virtual) network between hosts. Nothing here connects to a
namespace address from the root namespace. Needs root, iproute2 and
unshare; skipped with the reason otherwise. CI runs as root.
"""

from __future__ import annotations

import math
import os
import queue
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.conftest import finish
from multihost.jobs import NAMESPACE_HOSTS, daemon_on_host_0, every_collective
from integration.test_elastic import assert_went_on_and_ended_together, lines_of

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "netns-cluster.sh"
PROBE = HERE.parent / "integration" / "workers" / "probe.py"
FAST_PATHS = HERE.parent / "integration" / "workers" / "arena_path.py"
SURVIVOR = HERE.parent / "integration" / "workers" / "survivor.py"
ELASTIC_EXAMPLE = HERE.parents[1] / "examples" / "elastic_training.py"
NET = "10.78.0"
ENV = dict(os.environ, NC_PREFIX="acl", NC_BRIDGE="aclbr0", NC_NET=NET)
COORDINATOR = f"{NET}.1:29500"

pytestmark = [pytest.mark.timeout(180), *NAMESPACE_HOSTS]


def cluster(*args: str, timeout: float = 60) -> str:
    result = subprocess.run(["bash", str(SCRIPT), *args], env=ENV, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def on_host(host: int, *command: str, env: dict[str, str] | None = None
            ) -> subprocess.Popen[str]:
    """Start ``command`` inside host ``host``'s namespace."""
    return subprocess.Popen(["bash", str(SCRIPT), "exec", str(host), *command],
                            env={**ENV, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Four hosts, acl0 (coordinator) to acl3, with the daemon running on acl0."""
    cluster("down")  # leftovers of an interrupted run
    cluster("up", "4")
    port_file = tmp_path_factory.mktemp("coordinator") / "port"
    try:
        with daemon_on_host_0(on_host, f"{NET}.1", port_file):
            yield port_file
    finally:
        cluster("down")


def launch(node: int, job: str, *probe_args: str, env: dict[str, str] | None = None
           ) -> subprocess.Popen[str]:
    """asyncoll-run for node ``node`` of 3 (on host node + 1), one worker each."""
    return on_host(node + 1, sys.executable, "-m", "asyncoll.run", "--nnodes", "3",
                   "--node-rank", str(node), "--nproc-per-node", "1", "--coordinator",
                   COORDINATOR, "--job-id", job, str(PROBE), *probe_args, env=env)


def fail_host(procs: list[subprocess.Popen[str]], host: int, action: str,
              survivors: tuple[int, ...]) -> tuple[float, list[re.Match[str]]]:
    """Once every workers/survivor.py rank is READY, ``action`` ("cut" or "crash")
    ``host``; return when, and how each rank of ``survivors`` failed (its FAILED line)."""
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        time.sleep(0.3)
        at = time.time()
        cluster(action, str(host))
        outcomes = [finish(procs[rank], timeout=30) for rank in survivors]
    finally:
        cluster("crash", str(host))  # kill what runs on the host, then replug it
        cluster("heal", str(host))
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            finish(proc, timeout=10)
    failures = []
    for code, out, err in outcomes:
        match = re.search(r"FAILED (\w+) rank=(-?\d+) at=([\d.]+) (.*)", out)
        assert code == 0 and match, out + err
        failures.append(match)
    return at, failures


def test_all_reduce_across_three_hosts(hosts):
    outcomes = [finish(p) for p in [launch(node, "world") for node in range(3)]]
    for code, out, err in outcomes:
        assert code == 0, out + err
    lines = sorted(out.strip() for _, out, _ in outcomes)
    assert lines == [f"OK rank={r} world=3 sum=[6, 60]" for r in range(3)]


def test_every_collective_blocking_and_async_across_three_hosts(hosts):
    # Two workers per host: six ranks, and the sub-group of every other rank
    # spans all three hosts.
    text = every_collective(on_host, 1, 3, COORDINATOR)
    # Direct links only between the members the algorithms use (ring neighbours,
    # and partners among the hosts' leaders), not one to every other member.
    links = re.findall(r"Process (\d+) .* (\d+) \+ (\d+) of them its groups' direct links",
                       text)
    assert len(links) == 6, text
    for rank, world, sub in links:
        assert int(world) <= 2 + 2 * math.ceil(math.log2(3)) + 1, (rank, world, text)
        assert int(sub) <= 2 + 2 * math.ceil(math.log2(3)) + 1, (rank, sub, text)


def test_small_collectives_across_hosts_run_in_the_calling_thread_over_direct_links(hosts):
    # One rank on each of two hosts: the group has no arena, so its small
    # operations run over its own TCP connections between the hosts, in order
    # with those that go through the loop (see workers/arena_path.py).
    procs = [on_host(node + 1, sys.executable, "-m", "asyncoll.run", "--nnodes", "2",
                     "--node-rank", str(node), "--nproc-per-node", "1", "--coordinator",
                     COORDINATOR, "--job-id", "links", str(FAST_PATHS), "paths")
             for node in range(2)]
    outcomes = [finish(p, timeout=120) for p in procs]
    for code, out, err in outcomes:
        assert code == 0, out + err
    text = "".join(out for _, out, _ in outcomes)
    for rank in (0, 1):
        found = re.search(rf"RESULT {rank} here=(\d+) loop=(\d+) here_before_async=(\d+)",
                          text)
        # As on one host's arena: reduce_scatter too runs over the links.
        assert found and found.groups() == ("7", "2", "5"), text


def test_sub_group_across_hosts(hosts):
    outcomes = [finish(p) for p in [launch(node, "group", "--group", "0,2")
                                    for node in range(3)]]
    assert [code for code, _, _ in outcomes] == [0, 0, 0], outcomes
    assert [out.strip() for _, out, _ in outcomes] == [
        "OK rank=0 world=3 sum=[4, 40]", "OK rank=1 world=3 sum=[2, 20]",
        "OK rank=2 world=3 sum=[4, 40]"]


def test_worker_that_advertises_a_wrong_address_gets_a_clear_error(hosts):
    # Node 2 (host acl3) advertises acl0's address, where nobody listens for it.
    # Ranks 0 and 1 fail at once; rank 2, which nobody reached, hears it from
    # the coordinator when they leave.
    procs = [launch(node, "wrong-address", "--timeout", "8",
                    env={"ASYNCOLL_ADVERTISE_ADDR": f"{NET}.1"} if node == 2 else None)
             for node in range(3)]
    outcomes = [finish(p) for p in procs]
    assert all(code != 0 for code, _, _ in outcomes)
    text = "".join(out for _, out, _ in outcomes)
    assert re.search(rf"could not connect to rank 2 at {re.escape(NET)}\.1:\d+, the address "
                     r"it advertised from host acl3", text), text
    assert "set ASYNCOLL_ADVERTISE_ADDR or ASYNCOLL_SOCKET_IFNAME for that rank" in text


def test_host_cut_off_is_declared_lost_within_the_heartbeat_deadline(hosts):
    # One rank per host; host acl3 (rank 2) loses its cable mid-job: no reset,
    # no FIN, just silence. Only the coordinator's heartbeat deadline can tell.
    heartbeat = 3.0
    procs = [on_host(rank + 1, sys.executable, str(SURVIVOR), COORDINATOR, "3", str(rank),
                     "cut", "1000000", env={"ASYNCOLL_HEARTBEAT_TIMEOUT": str(heartbeat)})
             for rank in range(3)]
    cut_at, failures = fail_host(procs, 3, "cut", survivors=(0, 1))
    for match in failures:
        assert match[1] == "PeerLostError" and match[2] == "2", match[0]
        assert "on host acl3" in match[4], match[4]
        assert float(match[3]) - cut_at < heartbeat + 2.0, float(match[3]) - cut_at


def test_host_crash_while_the_others_wait_on_direct_links_names_the_lost_rank(hosts):
    # Small all_reduces across three hosts run over direct links in the calling
    # thread; host acl2 (rank 1) crashes: every process on it is killed.
    procs = [on_host(rank + 1, sys.executable, str(SURVIVOR), COORDINATOR, "3", str(rank),
                     "links-crash", "256") for rank in range(3)]
    _, failures = fail_host(procs, 2, "crash", survivors=(0, 2))
    for match in failures:
        assert match[1] == "PeerLostError" and match[2] == "1", match[0]


def test_elastic_job_across_hosts_goes_on_after_a_kill_9_and_admits_a_replacement(hosts):
    # examples/elastic_training.py, one worker per host on acl1-acl3, each host's
    # launcher with --max-restarts 1; the worker on acl3 is killed with SIGKILL.
    # The survivors on acl1 and acl2 go on over the network, acl3's launcher
    # starts a replacement there, and it joins the running job from its host.
    launchers = [subprocess.Popen(
        ["bash", str(SCRIPT), "exec", str(node + 1), sys.executable, "-m", "asyncoll.run",
         "--nnodes", "3", "--node-rank", str(node), "--nproc-per-node", "1",
         "--max-restarts", "1", "--coordinator", COORDINATOR, "--job-id", "elastic",
         str(ELASTIC_EXAMPLE), "--steps", "500", "--size", "20000"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in range(3)]
    lines = [lines_of(proc) for proc in launchers]
    seen = ["", "", ""]

    def read(wait: float = 0.0) -> None:
        for node, arriving in enumerate(lines):
            try:
                while True:
                    seen[node] += arriving.get(timeout=wait)
            except queue.Empty:
                pass

    try:
        started = re.compile(r"\[pid (\d+)\] rank (\d+) of 3 training")
        deadline = time.monotonic() + 90
        while len(pids := dict((int(r), int(p)) for p, r in
                               started.findall("".join(seen)))) < 3:
            assert time.monotonic() < deadline, seen
            read(0.05)
        assert f"[pid {pids[2]}] rank 2 of 3 training" in seen[2], seen  # on acl3
        time.sleep(0.5)
        os.kill(pids[2], signal.SIGKILL)
        codes = [proc.wait(timeout=150) for proc in launchers]
        read(2.0)
    finally:
        for proc in launchers:
            if proc.poll() is None:
                proc.kill()
    assert codes == [0, 0, 0], seen
    assert_went_on_and_ended_together("".join(seen), 3, 500)
