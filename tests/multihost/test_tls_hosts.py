"""A job across namespace hosts with TLS on: the daemon, the mesh and the direct links.

Three hosts (netns-cluster.sh): the coordinator on host 0 and two ranks on
each of hosts 1 and 2, every process with ASYNCOLL_TLS_CERT, ASYNCOLL_TLS_KEY
and ASYNCOLL_TLS_CA (the daemon reads them as its --tls-* defaults), so
every byte between hosts is mutual TLS. A worker without TLS is refused.
Needs root, iproute2, unshare and openssl; skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration import certificates
from integration.conftest import finish
from multihost.jobs import NAMESPACE_HOSTS, daemon_on_host_0, every_collective

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "netns-cluster.sh"
PROBE = HERE.parent / "integration" / "workers" / "probe.py"
NET = "10.79.0"
ENV = dict(os.environ, NC_PREFIX="acltls", NC_BRIDGE="acltlsbr0", NC_NET=NET)
COORDINATOR = f"{NET}.1:29500"

pytestmark = [pytest.mark.timeout(240), certificates.NEEDS_OPENSSL, *NAMESPACE_HOSTS]


def cluster(*args: str) -> None:
    result = subprocess.run(["bash", str(SCRIPT), *args], env=ENV, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def tls_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return certificates.make(tmp_path_factory.mktemp("certificates")).environment()


def on_host_with(env: dict[str, str]):
    def on_host(host: int, *command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(["bash", str(SCRIPT), "exec", str(host), *command],
                                env={**ENV, **env}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return on_host


@pytest.fixture(scope="module")
def tls_hosts(tmp_path_factory: pytest.TempPathFactory, tls_env) -> Iterator[None]:
    """Three hosts, the TLS daemon on host 0."""
    cluster("down")
    cluster("up", "3")
    port_file = tmp_path_factory.mktemp("coordinator") / "port"
    try:
        with daemon_on_host_0(on_host_with(tls_env), f"{NET}.1", port_file):
            yield
    finally:
        cluster("down")


def test_every_collective_runs_across_hosts_over_tls(tls_hosts, tls_env):
    every_collective(on_host_with(tls_env), 1, 2, COORDINATOR)


def test_a_worker_without_tls_is_refused_across_hosts(tls_hosts):
    no_tls = {"ASYNCOLL_TLS_CERT": "", "ASYNCOLL_TLS_KEY": "", "ASYNCOLL_TLS_CA": ""}
    proc = on_host_with(no_tls)(1, sys.executable, str(PROBE), "--init",
                                f"tcp://{COORDINATOR}", "--world-size", "2", "--rank", "0",
                                "--timeout", "20")
    code, out, err = finish(proc)
    assert code == 2, out + err
    assert "requires TLS and this peer connected without it" in out, out
