"""Jobs across two hosts that have IPv6 addresses only.

Each host is a Linux network namespace; a veth pair joins them, with
fd7a:6::1/64 on host 0 and fd7a:6::2/64 on host 1 and no IPv4 address but
loopback's. The coordinator runs on host 0, the workers on both, so every
byte between hosts crosses IPv6. Nothing here connects to a namespace
address from the root namespace (which has no address on that link). Needs
root, iproute2 and unshare; skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.conftest import finish
from multihost.jobs import NAMESPACE_HOSTS, daemon_on_host_0, every_collective

HERE = Path(__file__).resolve().parent
PROBE = HERE.parent / "integration" / "workers" / "probe.py"
HOSTS = ("acl6h0", "acl6h1")
ADDRESSES = ("fd7a:6::1", "fd7a:6::2")
COORDINATOR = f"[{ADDRESSES[0]}]:29500"

pytestmark = [pytest.mark.timeout(180), *NAMESPACE_HOSTS]


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"ip {' '.join(args)}: {result.stderr}"


def _down() -> None:
    for name in HOSTS:
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True,
                              timeout=30).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def on_host(host: int, *command: str, env: dict[str, str] | None = None
            ) -> subprocess.Popen[str]:
    """Start ``command`` inside host ``host``'s namespace, with that host's own hostname."""
    return subprocess.Popen(
        ["ip", "netns", "exec", HOSTS[host], "unshare", "--uts", "--", "sh", "-c",
         'hostname "$0"; exec "$@"', HOSTS[host], *command],
        env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The two IPv6-only hosts, with the coordinator daemon running on host 0."""
    _down()  # leftovers of an interrupted run
    for name in HOSTS:
        _ip("netns", "add", name)
    try:
        _ip("link", "add", "acl6v0", "netns", HOSTS[0], "type", "veth", "peer", "name",
            "acl6v1", "netns", HOSTS[1])
        for i, name in enumerate(HOSTS):
            _ip("-n", name, "link", "set", f"acl6v{i}", "name", "eth0")
            # nodad: the address is usable at once, not after duplicate detection.
            _ip("-n", name, "addr", "add", f"{ADDRESSES[i]}/64", "dev", "eth0", "nodad")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", "eth0", "up")
        port_file = tmp_path_factory.mktemp("coordinator") / "port"
        with daemon_on_host_0(on_host, ADDRESSES[0], port_file):
            yield port_file
    finally:
        _down()


def test_all_reduce_across_ipv6_only_hosts_one_advertising_its_interface(hosts):
    # Host 1 names its interface: it has no IPv4 address, so its IPv6 one is used.
    procs = [on_host(node, sys.executable, "-m", "asyncoll.run", "--nnodes", "2",
                     "--node-rank", str(node), "--nproc-per-node", "1", "--coordinator",
                     COORDINATOR, "--job-id", "probe", str(PROBE),
                     env={"ASYNCOLL_SOCKET_IFNAME": "eth0"} if node else None)
             for node in range(2)]
    outcomes = [finish(p) for p in procs]
    assert [code for code, _, _ in outcomes] == [0, 0], outcomes
    assert [out.strip() for _, out, _ in outcomes] == [
        "OK rank=0 world=2 sum=[3, 30]", "OK rank=1 world=2 sum=[3, 30]"]


def test_every_collective_blocking_and_async_across_ipv6_only_hosts(hosts):
    # Two workers per host: the sub-group of every other rank spans both hosts.
    every_collective(on_host, 0, 2, COORDINATOR)
