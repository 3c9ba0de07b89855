"""Who the coordinator's HTTP server answers without a token, and what its warning names.

Without a token or mutual TLS, the page and the JSON API answer only clients on
the coordinator's host, unless the operator made the server public
(--http-public); /metrics answers every client, for Prometheus. The start-up
warning names every port open to the network without a shared secret.
"""

from __future__ import annotations

import pytest

from asyncoll._rendezvous.state import RendezvousState
from asyncoll.coordinator.cli import open_ports
from asyncoll.coordinator.http import HttpServer, served_to

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("peer", [("127.0.0.1", 5000), ("127.3.4.5", 5000),
                                  ("::1", 5000, 0, 0), ("::ffff:127.0.0.1", 5000, 0, 0)],
                         ids=["ipv4", "ipv4-net", "ipv6", "ipv4-mapped"])
@pytest.mark.parametrize("path", ["/", "/index.html", "/api/jobs", "/api/events", "/metrics"])
def test_a_client_on_this_host_is_served_everything(peer: tuple[object, ...], path: str) -> None:
    assert served_to(peer, path)


@pytest.mark.parametrize("peer", [("192.0.2.2", 5000), ("10.0.0.7", 5000),
                                  ("fd00::2", 5000, 0, 0), ("::ffff:10.0.0.7", 5000, 0, 0),
                                  None, "/run/socket"],
                         ids=["ipv4", "private", "ipv6", "ipv4-mapped", "unknown", "unix"])
def test_a_client_on_another_host_gets_only_the_metrics(peer: object) -> None:
    for path in ("/", "/index.html", "/dashboard/index.html", "/api/jobs", "/api/jobs/x",
                 "/api/events"):
        assert not served_to(peer, path), path
    assert served_to(peer, "/metrics")


@pytest.mark.parametrize("token, public, expected", [
    (None, False, False), (None, True, True), (b"s3cret", False, True)],
    ids=["no-token", "http-public", "token"])
def test_a_token_or_the_public_flag_lets_every_client_in(token: bytes | None, public: bool,
                                                          expected: bool) -> None:
    server = HttpServer(RendezvousState(), "0.0.0.0", 0, token, None, False, lambda: "",
                        public=public)

    assert server.public is expected


def test_the_warning_names_the_rendezvous_and_the_http_port_open_without_a_secret() -> None:
    words = open_ports(("0.0.0.0", 29500), ("0.0.0.0", 9100, False), guarded=False)

    assert len(words) == 2
    assert words[0].startswith("the rendezvous port 0.0.0.0:29500")
    assert words[1].startswith("the HTTP port 0.0.0.0:9100")
    assert "the dashboard and /api to this host only" in words[1]


def test_the_warning_says_what_a_public_http_port_serves() -> None:
    (words,) = open_ports(("127.0.0.1", 29500), ("::", 9100, True), guarded=False)

    assert words.startswith("the HTTP port [::]:9100")
    assert "the dashboard, /api and /metrics to every client (--http-public)" in words


@pytest.mark.parametrize("rendezvous, http, guarded", [
    (("127.0.0.1", 29500), ("127.0.0.1", 9100, False), False),
    (("::1", 29500), None, False),
    (("0.0.0.0", 29500), ("0.0.0.0", 9100, True), True)],
    ids=["loopback", "loopback-no-http", "token"])
def test_no_warning_for_loopback_ports_or_with_a_secret(
        rendezvous: tuple[str, int], http: tuple[str, int, bool] | None,
        guarded: bool) -> None:
    assert open_ports(rendezvous, http, guarded) == []
