"""``--host 0.0.0.0 --metrics-port P`` without a token: the page and the API for this host only.

A real daemon bound to every interface, asked from 127.0.0.1 and, where this
machine has one, from an address of its own that is not loopback (a client
of another host, as the server sees it): the latter gets /metrics and a 403
for the page and the API, unless the daemon runs with --http-public. Its
start-up warning names both ports.
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path

import pytest

from .conftest import Daemon

pytest.importorskip("prometheus_client")
pytestmark = pytest.mark.timeout(60)

PATHS = ("/", "/api/jobs", "/api/events", "/metrics")


def get(host: str, port: int, path: str) -> tuple[int, bytes]:
    """(status, body) of GET ``path`` from ``host``'s own address (its source, too)."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def own_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (None: it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a route's source address; nothing is sent
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def open_daemon(tmp_path: Path, *extra: str) -> tuple[Daemon, int]:
    daemon = Daemon(tmp_path, "--metrics-port", "0", "--metrics-port-file",
                    str(tmp_path / "metrics.port"), *extra, host="0.0.0.0")
    daemon.wait_for_log("WITHOUT a shared secret")
    return daemon, int((tmp_path / "metrics.port").read_text())


def test_every_interface_without_a_token_serves_this_host_and_warns_of_both_ports(
        tmp_path: Path) -> None:
    daemon, port = open_daemon(tmp_path)
    try:
        got = {path: get("127.0.0.1", port, path)[0] for path in PATHS}
        warning = next(line for line in daemon.log().splitlines()
                       if "WITHOUT a shared secret" in line)
    finally:
        daemon.stop()

    assert got == dict.fromkeys(PATHS, 200)
    assert f"the rendezvous port 0.0.0.0:{daemon.port}" in warning, warning
    assert f"the HTTP port 0.0.0.0:{port}" in warning, warning


@pytest.mark.skipif(own_address() is None, reason="this machine has no address but loopback")
def test_a_client_of_another_address_gets_the_metrics_and_no_page_or_api(
        tmp_path: Path) -> None:
    address = own_address()
    assert address is not None
    daemon, port = open_daemon(tmp_path)
    try:
        got = {path: get(address, port, path) for path in PATHS}
    finally:
        daemon.stop()

    assert got["/metrics"][0] == 200 and b"asyncoll_jobs" in got["/metrics"][1]
    for path in ("/", "/api/jobs", "/api/events"):
        status, body = got[path]
        assert status == 403, (path, status, body[:200])
        answer = json.loads(body)
        assert list(answer) == ["error"], answer  # nothing of the jobs
        assert "only to clients on its own host" in answer["error"], answer
        assert "--http-public" in answer["error"], answer
    assert "refused an HTTP request from" in daemon.log()


@pytest.mark.skipif(own_address() is None, reason="this machine has no address but loopback")
def test_with_http_public_a_client_of_another_address_gets_the_page_and_the_api(
        tmp_path: Path) -> None:
    address = own_address()
    assert address is not None
    daemon, port = open_daemon(tmp_path, "--http-public")
    try:
        got = {path: get(address, port, path)[0] for path in PATHS}
        log = daemon.log()
    finally:
        daemon.stop()

    assert got == dict.fromkeys(PATHS, 200)
    assert "the dashboard, /api and /metrics to every client (--http-public)" in log
